// libFuzzer target for the safetensors reader (see fuzz_gguf.cpp for the contract).
#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = pg::io::SafetensorsFile::FromMemory(data, size, "fuzz.safetensors");
    volatile uint64_t sink = 0;
    for (const auto& t : f->tensors()) {
      for (uint64_t i = 0; i < t.nbytes(); ++i) sink = sink + t.data[i];
      if (int64_t(t.nbytes()) != t.view().nbytes()) __builtin_trap();
      if (f->FindTensor(t.name) == nullptr) __builtin_trap();
    }
    for (const auto& [k, v] : f->metadata()) sink = sink + k.size() + v.size();
  } catch (const pg::Error&) {
  }
  return 0;
}
