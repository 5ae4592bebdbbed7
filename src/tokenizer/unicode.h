// UTF-8 and GPT-2 byte-level helpers shared by the BPE tokenizer, its loaders and the
// streaming detokenizer. All functions are pure and thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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

}  // namespace pg::tokenizer
