// Strict UTF-8 validation (RFC 3629): no overlong forms, no surrogates (U+D800..U+DFFF),
// nothing above U+10FFFF, no truncated sequences. Used for keys, names and strings read
// from model files.
#pragma once

#include <cstddef>
#include <string_view>

namespace pg::io {

// Byte index of the first byte of the first invalid sequence, or std::string_view::npos
// if `s` is valid UTF-8.
size_t FindInvalidUtf8(std::string_view s);
inline bool IsValidUtf8(std::string_view s) { return FindInvalidUtf8(s) == std::string_view::npos; }

}  // namespace pg::io
