// libFuzzer target for the strict JSON parser and the HF config readers: the input is taken
// as the text of a generation_config.json / tokenizer_config.json.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/status.h"
#include "io/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j;
  try {
    j = pg::io::ParseJsonStrict(std::string_view(reinterpret_cast<const char*>(data), size),
                                "fuzz.json");
  } catch (const pg::Error&) {
    return 0;
  }
  try { (void)pg::io::ParseGenerationConfig(j, "fuzz.json"); } catch (const pg::Error&) {}
  try {
    auto t = pg::io::ParseTokenizerConfig(j, "fuzz.json");
    (void)t.DefaultChatTemplate();
  } catch (const pg::Error&) {}
  try { (void)pg::io::GetOr<int32_t>(j, "hidden_size", 0, "fuzz.json"); } catch (const pg::Error&) {}
  try { (void)pg::io::GetOr<double>(j, "rope_theta", 0, "fuzz.json"); } catch (const pg::Error&) {}
  return 0;
}
