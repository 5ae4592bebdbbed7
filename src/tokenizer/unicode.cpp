#include "tokenizer/unicode.h"

namespace pg::tokenizer {
namespace {

struct ByteLevelTables {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<int16_t, 324> cp_to_byte{};  // every mapped code point is < 256 + 68

  ByteLevelTables() {
    cp_to_byte.fill(-1);
    uint32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
                             (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next_extra++;
      byte_to_cp[b] = cp;
      cp_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& Tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace

const std::array<uint32_t, 256>& ByteToCodepoint() { return Tables().byte_to_cp; }

int CodepointToByte(uint32_t cp) {
  return cp < Tables().cp_to_byte.size() ? Tables().cp_to_byte[cp] : -1;
}

bool ByteLevelToBytes(std::string_view token, std::string* out) {
  out->clear();
  out->reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    uint32_t cp;
    if (!NextCodepoint(token, &pos, &cp)) return false;
    const int b = CodepointToByte(cp);
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
  }
  return true;
}

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(&out, ByteToCodepoint()[static_cast<uint8_t>(c)]);
  return out;
}

}  // namespace pg::tokenizer
