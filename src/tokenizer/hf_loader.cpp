// Tokenizer::FromHfJson: HF tokenizers' tokenizer.json for byte-level BPE models.
#include <array>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace pg::tokenizer {
namespace {

using nlohmann::json;

std::string TypeOf(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string();
}

bool BoolOr(const json& j, const char* key, bool def) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? def : it->get<bool>();
}

// Vocab/merge spelling (byte-level alphabet) -> raw bytes; a spelling outside the alphabet
// (only seen for added tokens) stays as its UTF-8 text.
std::string ToBytes(const std::string& spelled) {
  std::string bytes;
  return ByteLevelToBytes(spelled, &bytes) ? bytes : spelled;
}

void AddPreTokenizer(const json& j, const std::string& name, std::vector<PreTokenizeStep>* steps) {
  if (j.is_null()) return;
  const std::string type = TypeOf(j);
  auto regex_step = [&](std::string_view pattern, SplitBehavior behavior) {
    steps->push_back({std::make_shared<const Regex>(pattern), behavior});
  };
  if (type == "Sequence") {
    for (const json& p : j.at("pretokenizers")) AddPreTokenizer(p, name, steps);
  } else if (type == "Split") {
    const json& pat = j.at("pattern");
    std::string pattern;
    if (pat.contains("Regex")) {
      pattern = pat["Regex"].get<std::string>();
    } else {
      pattern = "\\Q" + pat.at("String").get<std::string>() + "\\E";
    }
    PG_ENSURE(!BoolOr(j, "invert", false), kUnsupported, "{}: Split with invert=true", name);
    const std::string behavior = j.at("behavior").get<std::string>();
    if (behavior == "Isolated") {
      regex_step(pattern, SplitBehavior::kIsolated);
    } else if (behavior == "Removed") {
      regex_step(pattern, SplitBehavior::kRemoved);
    } else {
      Throw(ErrorCode::kUnsupported, "{}: Split behavior '{}' (supported: Isolated, Removed)",
            name, behavior);
    }
  } else if (type == "ByteLevel") {
    PG_ENSURE(!BoolOr(j, "add_prefix_space", false), kUnsupported,
              "{}: ByteLevel pre-tokenizer with add_prefix_space=true", name);
    if (BoolOr(j, "use_regex", true)) regex_step(kGpt2Pattern, SplitBehavior::kIsolated);
  } else if (type == "Digits") {
    regex_step(BoolOr(j, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)",
               SplitBehavior::kIsolated);
  } else {
    Throw(ErrorCode::kUnsupported,
          "{}: pre-tokenizer '{}' (supported: Sequence, Split, ByteLevel, Digits)", name, type);
  }
}

Normalizer ParseNormalizer(const json& j, const std::string& name) {
  if (j.is_null()) return Normalizer::kNone;
  const std::string type = TypeOf(j);
  if (type == "NFC") return Normalizer::kNfc;
  if (type == "Sequence") {
    Normalizer n = Normalizer::kNone;
    for (const json& s : j.at("normalizers")) {
      const Normalizer inner = ParseNormalizer(s, name);
      if (inner != Normalizer::kNone) n = inner;
    }
    return n;
  }
  Throw(ErrorCode::kUnsupported, "{}: normalizer '{}' (supported: NFC)", name, type);
}

// TemplateProcessing "single": [SpecialToken..., Sequence A, SpecialToken...].
void ParsePostProcessor(const json& j, const std::string& name, TokenizerSpec* spec) {
  if (j.is_null()) return;
  const std::string type = TypeOf(j);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    for (const json& p : j.at("processors")) ParsePostProcessor(p, name, spec);
    return;
  }
  PG_ENSURE(type == "TemplateProcessing", kUnsupported,
            "{}: post-processor '{}' (supported: ByteLevel, TemplateProcessing, Sequence)", name,
            type);
  const json& specials = j.at("special_tokens");
  bool seen_sequence = false;
  for (const json& item : j.at("single")) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const std::string token = item.at("SpecialToken").at("id").get<std::string>();
    PG_ENSURE(specials.contains(token), kMalformed,
              "{}: post-processor uses '{}' without listing it in special_tokens", name, token);
    for (const json& id : specials[token].at("ids"))
      (seen_sequence ? spec->suffix_ids : spec->prefix_ids).push_back(id.get<int32_t>());
  }
}

// model.vocab and model.merges, taken out of the token stream by ParseCallback.
struct BigFields {
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  bool saw_vocab = false, saw_merges = false;
  std::string error;  // first malformed entry
};

// nlohmann parser callback: captures model.vocab entries and model.merges items into
// BigFields and drops them from the DOM (returning false discards a value).
class ParseCallback {
 public:
  explicit ParseCallback(BigFields* big) : big_(big) {}
  bool operator()(int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    const bool in_model = depth >= 3 && keys_[1] == "model";
    switch (event) {
      case E::key:
        if (depth < int(keys_.size())) keys_[depth] = parsed.get<std::string>();
        if (in_model && depth == 3 && keys_[2] == "vocab") pending_key_ = parsed.get<std::string>();
        return true;
      case E::object_start:
      case E::array_start:
        if (depth + 1 < int(keys_.size())) keys_[depth + 1].clear();
        if (depth == 2 && keys_[1] == "model" && keys_[2] == "vocab")
          big_->saw_vocab = event == E::object_start;
        if (depth == 2 && keys_[1] == "model" && keys_[2] == "merges")
          big_->saw_merges = event == E::array_start;
        return true;
      case E::value:
        if (in_model && depth == 3 && keys_[2] == "vocab") {
          if (parsed.is_number_integer()) {
            big_->vocab.emplace_back(std::move(pending_key_), parsed.get<int64_t>());
          } else if (big_->error.empty()) {
            big_->error = "vocab id of '" + pending_key_ + "' is not an integer";
          }
          return false;
        }
        if (in_model && depth == 3 && keys_[2] == "merges") {
          const std::string* m = parsed.get_ptr<const std::string*>();
          const size_t space = m ? m->find(' ') : std::string::npos;
          if (space != std::string::npos && m->find(' ', space + 1) == std::string::npos) {
            big_->merges.emplace_back(m->substr(0, space), m->substr(space + 1));
          } else if (big_->error.empty()) {
            big_->error = "merge " + parsed.dump() + " is not two space-separated tokens";
          }
          return false;
        }
        return true;
      case E::array_end:
        if (in_model && depth == 3 && keys_[2] == "merges") {
          if (parsed.size() == 2 && parsed[0].is_string() && parsed[1].is_string()) {
            big_->merges.emplace_back(parsed[0].get<std::string>(), parsed[1].get<std::string>());
          } else if (big_->error.empty()) {
            big_->error = "merge " + parsed.dump() + " is not a pair of strings";
          }
          return false;
        }
        return true;
      default:
        return true;
    }
  }

 private:
  BigFields* big_;
  std::array<std::string, 4> keys_;  // last key seen at each depth 0..3
  std::string pending_key_;
};

std::unique_ptr<Tokenizer> Build(const json& j, const BigFields& big, const std::string& name) {
  TokenizerSpec spec;
  spec.name = name;
  const json& model = j.at("model");
  const std::string model_type = TypeOf(model);
  PG_ENSURE(model_type == "BPE" || (model_type.empty() && model.contains("merges")), kUnsupported,
            "{}: tokenizer model '{}' (supported: BPE)", name, model_type);
  PG_ENSURE(!model.contains("dropout") || model["dropout"].is_null(), kUnsupported,
            "{}: BPE dropout", name);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    PG_ENSURE(!model.contains(key) || model[key].is_null() || model[key] == "", kUnsupported,
              "{}: BPE {}", name, key);
  }
  PG_ENSURE(!BoolOr(model, "byte_fallback", false), kUnsupported, "{}: BPE byte_fallback", name);
  spec.bpe.ignore_merges = BoolOr(model, "ignore_merges", false);

  // vocab {"spelling": id} and merges ("left right" strings or [left, right] pairs) were
  // captured while parsing (they are most of the file; no DOM is built for them).
  PG_ENSURE(big.saw_vocab, kMalformed, "{}: model.vocab missing or not an object", name);
  PG_ENSURE(big.saw_merges, kMalformed, "{}: model.merges missing or not an array", name);
  PG_ENSURE(big.error.empty(), kMalformed, "{}: {}", name, big.error);
  size_t max_id = 0;
  for (const auto& [spelling, id] : big.vocab) {
    PG_ENSURE(id >= 0 && id < (int64_t{1} << 24), kMalformed, "{}: vocab id {} out of range",
              name, id);
    max_id = std::max(max_id, size_t(id));
  }
  spec.bpe.vocab.assign(big.vocab.empty() ? 0 : max_id + 1, std::string());
  for (const auto& [spelling, id] : big.vocab) spec.bpe.vocab[size_t(id)] = ToBytes(spelling);
  spec.bpe.merges.reserve(big.merges.size());
  for (const auto& [left, right] : big.merges)
    spec.bpe.merges.emplace_back(ToBytes(left), ToBytes(right));

  spec.normalizer = ParseNormalizer(j.value("normalizer", json()), name);
  AddPreTokenizer(j.value("pre_tokenizer", json()), name, &spec.pre_tokenize);
  // Digits(individual) + ByteLevel(GPT-2 regex), as SmolLM2 has it: one fused pass.
  if (spec.pre_tokenize.size() == 2 && spec.pre_tokenize[0].regex->pattern() == R"(\p{N})" &&
      spec.pre_tokenize[1].regex->pattern() == kGpt2Pattern &&
      spec.pre_tokenize[0].behavior == SplitBehavior::kIsolated &&
      spec.pre_tokenize[1].behavior == SplitBehavior::kIsolated) {
    spec.pre_tokenize = {{std::make_shared<const Regex>(kSmolLmFusedPattern),
                          SplitBehavior::kIsolated}};
  }
  const json decoder = j.value("decoder", json());
  PG_ENSURE(TypeOf(decoder) == "ByteLevel", kUnsupported,
            "{}: decoder '{}' (supported: ByteLevel)", name, TypeOf(decoder));
  ParsePostProcessor(j.value("post_processor", json()), name, &spec);

  for (const json& t : j.value("added_tokens", json::array())) {
    AddedToken a;
    a.id = t.at("id").get<int32_t>();
    a.content = t.at("content").get<std::string>();
    a.special = BoolOr(t, "special", false);
    a.lstrip = BoolOr(t, "lstrip", false);
    a.rstrip = BoolOr(t, "rstrip", false);
    a.single_word = BoolOr(t, "single_word", false);
    a.normalized = BoolOr(t, "normalized", !a.special);
    spec.added_tokens.push_back(std::move(a));
  }
  if (!spec.prefix_ids.empty()) spec.bos_id = spec.prefix_ids.front();
  // tokenizer.json does not name the EOS (tokenizer_config/generation_config do): take the
  // usual end-of-turn / end-of-text tokens present; the engine may SetEosIds() from config.
  for (const char* eos : {"<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>",
                          "<|eom_id|>", "</s>"}) {
    for (const AddedToken& a : spec.added_tokens)
      if (a.content == eos) spec.eos_ids.push_back(a.id);
  }
  return std::make_unique<Tokenizer>(std::move(spec));
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::FromHfJsonText(std::string_view text, std::string name) {
  json j;
  BigFields big;
  try {
    j = json::parse(text, ParseCallback(&big));
  } catch (const json::exception& e) {
    Throw(ErrorCode::kMalformed, "{}: invalid tokenizer.json: {}", name, e.what());
  }
  try {
    return Build(j, big, name);
  } catch (const json::exception& e) {
    Throw(ErrorCode::kMalformed, "{}: unexpected tokenizer.json content: {}", name, e.what());
  }
}

std::unique_ptr<Tokenizer> Tokenizer::FromHfJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PG_ENSURE(in.good(), kNotFound, "cannot open tokenizer file '{}'", path);
  std::stringstream buf;
  buf << in.rdbuf();
  return FromHfJsonText(buf.str(), path);
}

}  // namespace pg::tokenizer
