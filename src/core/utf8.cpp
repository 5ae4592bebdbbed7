#include "core/utf8.h"

namespace pg {
namespace {

// Length and valid range of the second byte for a lead byte (Unicode Table 3-7).
// Returns 0 for a byte that can never start a sequence.
inline int SeqInfo(uint8_t lead, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) {
    if (lead == 0xE0) *lo = 0xA0;
    if (lead == 0xED) *hi = 0x9F;
    return 3;
  }
  if (lead < 0xF5) {
    if (lead == 0xF0) *lo = 0x90;
    if (lead == 0xF4) *hi = 0x8F;
    return 4;
  }
  return 0;
}

// Length of the maximal well-formed prefix of a sequence starting at s[pos]:
// returns {n, complete}. n >= 1 unless the lead itself is invalid (then n = 0).
struct Prefix {
  size_t n;
  bool complete;
};
inline Prefix ScanSequence(std::string_view s, size_t pos) {
  uint8_t lo, hi;
  const auto lead = static_cast<uint8_t>(s[pos]);
  const int len = SeqInfo(lead, &lo, &hi);
  if (len == 0) return {0, false};
  size_t n = 1;
  for (int k = 1; k < len; ++k) {
    if (pos + n >= s.size()) return {n, false};
    const auto c = static_cast<uint8_t>(s[pos + n]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) return {n, false};
    ++n;
  }
  return {n, true};
}

}  // namespace

void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool NextCodepoint(std::string_view s, size_t* pos, uint32_t* cp) {
  const Prefix p = ScanSequence(s, *pos);
  if (!p.complete) return false;
  const auto* b = reinterpret_cast<const uint8_t*>(s.data() + *pos);
  switch (p.n) {
    case 1: *cp = b[0]; break;
    case 2: *cp = ((b[0] & 0x1Fu) << 6) | (b[1] & 0x3Fu); break;
    case 3: *cp = ((b[0] & 0x0Fu) << 12) | ((b[1] & 0x3Fu) << 6) | (b[2] & 0x3Fu); break;
    default:
      *cp = ((b[0] & 0x07u) << 18) | ((b[1] & 0x3Fu) << 12) | ((b[2] & 0x3Fu) << 6) |
            (b[3] & 0x3Fu);
  }
  *pos += p.n;
  return true;
}

size_t FirstInvalidUtf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Prefix p = ScanSequence(s, pos);
    if (!p.complete) return pos;
    pos += p.n;
  }
  return s.size();
}

bool IsValidUtf8(std::string_view s) { return FirstInvalidUtf8(s) == s.size(); }

void AppendUtf8Lossy(std::string* out, std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t bad = pos + FirstInvalidUtf8(bytes.substr(pos));
    out->append(bytes.data() + pos, bad - pos);
    if (bad == bytes.size()) return;
    const Prefix p = ScanSequence(bytes, bad);
    out->append("\xEF\xBF\xBD");  // U+FFFD for the maximal subpart (at least one byte)
    pos = bad + (p.n == 0 ? 1 : p.n);
  }
}

size_t IncompleteUtf8Tail(std::string_view s) {
  // A pending sequence starts at most 3 bytes before the end.
  const size_t first = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t start = first; start < s.size(); ++start) {
    const auto b = static_cast<uint8_t>(s[start]);
    if (b < 0xC0) continue;  // ASCII or continuation: not a lead
    const Prefix p = ScanSequence(s, start);
    if (!p.complete && start + p.n == s.size() && p.n > 0) return s.size() - start;
  }
  return 0;
}

}  // namespace pg
