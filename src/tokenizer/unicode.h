// GPT-2 byte-level helpers (and, from core, UTF-8 ones) shared by the BPE tokenizer, its loaders and the
// streaming detokenizer. All functions are pure and thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.h"

namespace pg::tokenizer {

// GPT-2's reversible byte <-> printable code point map: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order (space -> U+0120 'Ġ').
const std::array<uint32_t, 256>& ByteToCodepoint();
// Inverse of ByteToCodepoint(); -1 for a code point that is not in the map.
int CodepointToByte(uint32_t cp);

// Byte-level token text (as in tokenizer.json / GGUF) -> raw bytes. Returns false (and leaves
// `out` unspecified) when a character is outside the byte-level alphabet.
bool ByteLevelToBytes(std::string_view token, std::string* out);
// Raw bytes -> byte-level text (every byte becomes one code point, UTF-8 encoded).
std::string BytesToByteLevel(std::string_view bytes);

// The UTF-8 helpers live in core (core/utf8.h); these names keep the tokenizer's callers as
// they were.
using pg::AppendUtf8;
using pg::AppendUtf8Lossy;
using pg::FirstInvalidUtf8;
using pg::IncompleteUtf8Tail;
using pg::IsValidUtf8;
using pg::NextCodepoint;

}  // namespace pg::tokenizer
