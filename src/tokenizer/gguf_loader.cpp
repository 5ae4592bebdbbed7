// Tokenizer::FromGguf: the tokenizer.ggml.* metadata of a GGUF file (llama.cpp's layout).
#include <algorithm>

#include "core/status.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace pg::tokenizer {
namespace {

// llama.cpp's token types.
enum GgufTokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

const io::GgufArray& ArrayOrThrow(const io::GgufFile& g, std::string_view key) {
  const io::GgufValue* v = g.Find(key);
  PG_ENSURE(v != nullptr, kMalformed, "{}: missing tokenizer metadata '{}'", g.path(), key);
  PG_ENSURE(v->type == io::GgufType::kArray, kMalformed, "{}: '{}' is not an array", g.path(),
            key);
  return v->AsArray();
}

bool BoolOr(const io::GgufFile& g, std::string_view key, bool def) {
  const io::GgufValue* v = g.Find(key);
  return v ? v->AsBool() : def;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::FromGguf(const io::GgufFile& g) {
  TokenizerSpec spec;
  spec.name = g.path();
  const std::string model = g.GetStringOr("tokenizer.ggml.model", "");
  PG_ENSURE(model == "gpt2", kUnsupported,
            "{}: tokenizer.ggml.model '{}' is not supported (supported: gpt2, byte-level BPE)",
            g.path(), model);
  const std::string pre = g.GetStringOr("tokenizer.ggml.pre", "default");
  spec.pre_tokenize = PreTokenizeStepsForFamily(pre);  // unknown pre -> kUnsupported
  // HF's configurations for these families: Qwen2/3 normalize to NFC; Llama-3 ignores merges
  // for pieces that are whole vocab entries.
  if (pre == "qwen2") spec.normalizer = Normalizer::kNfc;
  spec.bpe.ignore_merges = pre == "llama-bpe" || pre == "llama3";

  const io::GgufArray& tokens = ArrayOrThrow(g, "tokenizer.ggml.tokens");
  const io::GgufArray& merges = ArrayOrThrow(g, "tokenizer.ggml.merges");
  const io::GgufValue* types_value = g.Find("tokenizer.ggml.token_type");
  const io::GgufArray* types = types_value ? &types_value->AsArray() : nullptr;
  PG_ENSURE(types == nullptr || types->size() == tokens.size(), kMalformed,
            "{}: {} token types for {} tokens", g.path(), types ? types->size() : 0,
            tokens.size());

  spec.bpe.vocab.resize(tokens.size());
  std::string bytes;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& text = tokens[id].AsString();
    const int64_t type = types ? (*types)[id].AsInt() : kNormal;
    if (type == kControl || type == kUserDefined) {
      AddedToken a;
      a.id = int32_t(id);
      a.content = text;
      a.special = type == kControl;
      spec.added_tokens.push_back(std::move(a));
    }
    spec.bpe.vocab[id] = ByteLevelToBytes(text, &bytes) ? bytes : text;
  }
  spec.bpe.merges.reserve(merges.size());
  std::string left, right;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i].AsString();
    const size_t space = m.find(' ');
    PG_ENSURE(space != std::string::npos, kMalformed, "{}: merge #{} '{}' has no space",
              g.path(), i, m);
    left = m.substr(0, space);
    right = m.substr(space + 1);
    std::string left_bytes, right_bytes;
    if (!ByteLevelToBytes(left, &left_bytes)) left_bytes = left;
    if (!ByteLevelToBytes(right, &right_bytes)) right_bytes = right;
    spec.bpe.merges.emplace_back(std::move(left_bytes), std::move(right_bytes));
  }

  const int64_t num_tokens = int64_t(tokens.size());
  auto optional_id = [&](std::string_view key) -> std::optional<int32_t> {
    const int64_t id = g.GetIntOr(key, -1);
    if (id < 0) return std::nullopt;
    PG_ENSURE(id < num_tokens, kMalformed, "{}: {} = {} is not a token id (vocab {})", g.path(),
              key, id, num_tokens);
    return int32_t(id);
  };
  spec.bos_id = optional_id("tokenizer.ggml.bos_token_id");
  spec.pad_id = optional_id("tokenizer.ggml.padding_token_id");
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    if (auto id = optional_id(key); id && std::find(spec.eos_ids.begin(), spec.eos_ids.end(),
                                                    *id) == spec.eos_ids.end())
      spec.eos_ids.push_back(*id);
  }
  if (BoolOr(g, "tokenizer.ggml.add_bos_token", false)) {
    PG_ENSURE(spec.bos_id.has_value(), kMalformed, "{}: add_bos_token without bos_token_id",
              g.path());
    spec.prefix_ids.push_back(*spec.bos_id);
  }
  if (BoolOr(g, "tokenizer.ggml.add_eos_token", false) && !spec.eos_ids.empty())
    spec.suffix_ids.push_back(spec.eos_ids.front());
  return std::make_unique<Tokenizer>(std::move(spec));
}

}  // namespace pg::tokenizer
