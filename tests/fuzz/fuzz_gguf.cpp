// libFuzzer target for the GGUF reader: any input either parses or throws pg::Error; on
// success every tensor's bytes and every metadata value are touched, so ASan catches a range
// the parser accepted but that lies outside the input.
#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "io/gguf.h"

namespace {

uint64_t Touch(const pg::io::GgufValue& v) {
  using pg::io::GgufType;
  uint64_t h = uint64_t(v.type);
  if (v.type == GgufType::kArray) {
    for (const auto& e : v.AsArray()) h = h * 31 + Touch(e);
  } else if (v.type == GgufType::kString) {
    for (char c : v.AsString()) h = h * 131 + uint8_t(c);
  } else if (v.type == GgufType::kBool) {
    h += v.AsBool();
  } else if (v.type == GgufType::kF32 || v.type == GgufType::kF64) {
    h += uint64_t(v.AsFloat() != 0);
  } else {
    try { h += uint64_t(v.AsInt()); } catch (const pg::Error&) { h += 1; }  // u64 > INT64_MAX
  }
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = pg::io::GgufFile::FromMemory(data, size, "fuzz.gguf");
    volatile uint64_t sink = 0;
    for (const auto& [k, v] : f->metadata()) sink = sink + Touch(v) + k.size();
    for (const auto& t : f->tensors()) {
      for (uint64_t i = 0; i < t.nbytes; ++i) sink = sink + t.data[i];
      (void)t.view().nbytes();
      if (f->FindTensor(t.name) == nullptr) __builtin_trap();
    }
    (void)f->GetIntOr("general.alignment", 0);
  } catch (const pg::Error&) {
  }
  return 0;
}
