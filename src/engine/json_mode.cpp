#include "engine/json_mode.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace pg::engine {

std::shared_ptr<const runtime::TokenTable> MakeTokenTable(const tokenizer::Tokenizer& tokenizer,
                                                          std::span<const int32_t> eos_ids) {
  const int32_t n = tokenizer.vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<uint8_t> special(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    bytes[size_t(id)] = std::string(tokenizer.TokenToPiece(id));
    special[size_t(id)] = tokenizer.IsSpecial(id) ? 1 : 0;
  }
  std::vector<int32_t> eos(eos_ids.begin(), eos_ids.end());
  for (int32_t e : tokenizer.eos_ids())
    if (std::find(eos.begin(), eos.end(), e) == eos.end()) eos.push_back(e);
  return std::make_shared<const runtime::TokenTable>(
      runtime::TokenTable::Make(std::move(bytes), std::move(special), std::move(eos)));
}

}  // namespace pg::engine
