// Unicode normalization for the tokenizer's normalizer step (HF "NFC", used by Qwen2/3).
#pragma once

#include <string>
#include <string_view>

namespace pg::tokenizer {

// False when `text` is certainly already NFC (pure ASCII, or ICU's quick check says yes):
// the common case costs one scan and no allocation.
bool NeedsNfc(std::string_view text);
// NFC of valid UTF-8 text.
std::string ToNfc(std::string_view text);

}  // namespace pg::tokenizer
