// UTF-8: encoding a code point, decoding well-formed scalars, validity, lossy repair, and a
// pending sequence's length at a text's end. Shared by the tokenizer (detokenizer, loaders)
// and constrained output (regexes over UTF-8 bytes). Pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pg {

void AppendUtf8(std::string* out, uint32_t cp);

// Decodes one well-formed UTF-8 scalar at s[*pos] and advances *pos. Returns false on an
// ill-formed or truncated sequence (then *pos is unchanged).
bool NextCodepoint(std::string_view s, size_t* pos, uint32_t* cp);
bool IsValidUtf8(std::string_view s);
// Byte offset of the first ill-formed sequence, or s.size() when s is valid.
size_t FirstInvalidUtf8(std::string_view s);

// Appends `bytes` to *out with every maximal ill-formed subpart replaced by one U+FFFD (the
// Unicode/WHATWG "maximal subpart" rule, as Rust's String::from_utf8_lossy does).
void AppendUtf8Lossy(std::string* out, std::string_view bytes);

// Length of the trailing bytes of `s` that begin a well-formed sequence which is not complete
// yet (0..3). Bytes before it are complete or definitely ill-formed.
size_t IncompleteUtf8Tail(std::string_view s);

}  // namespace pg
