#include "tokenizer/normalize.h"

#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include "core/status.h"

namespace pg::tokenizer {
namespace {

const icu::Normalizer2& Nfc() {
  static const icu::Normalizer2* nfc = [] {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
    PG_CHECK(U_SUCCESS(status) && n != nullptr, "ICU NFC instance unavailable: {}",
             u_errorName(status));
    return n;
  }();
  return *nfc;
}

}  // namespace

bool NeedsNfc(std::string_view text) {
  bool ascii = true;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return false;
  UErrorCode status = U_ZERO_ERROR;
  const bool is_nfc =
      Nfc().isNormalizedUTF8(icu::StringPiece(text.data(), int32_t(text.size())), status);
  return U_FAILURE(status) || !is_nfc;
}

std::string ToNfc(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, int32_t(text.size()));
  Nfc().normalizeUTF8(0, icu::StringPiece(text.data(), int32_t(text.size())), sink, nullptr,
                      status);
  PG_ENSURE(U_SUCCESS(status), kInvalidArgument, "NFC normalization failed: {}",
            u_errorName(status));
  return out;
}

}  // namespace pg::tokenizer
