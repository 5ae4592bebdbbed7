// The JSON masks' cost (runtime/json_constraint.h, json_schema.h), µs a call, on the embedded
// model's tokenizer (49,152 ids) and on a table of its pieces repeated 3x (147,456 ids, Qwen3's
// vocabulary size), in the states a JSON output spends its tokens in: JSON mode, then a schema
// (required and optional properties, an enum, a bounded string, an array of objects), a
// schema's pattern strings, and regexes (guided_regex / guided_choice). Prints; asserts nothing.
//   build/cpu/tests/unit/engine/bench_json_mask
#include <chrono>
#include <random>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/json_mode.h"
#include "engine/model_bundle.h"
#include "runtime/json_constraint.h"
#include "runtime/json_schema.h"
#include "runtime/grammar.h"
#include "unit/runtime/json_gbnf.h"
#include "runtime/regex_constraint.h"
#include "kernels/ops_sample.h"

namespace {

double MicrosPerMask(const pg::runtime::OutputConstraint& c, size_t vocab) {
  std::vector<float> logits(vocab, 0.5f);
  c.Mask(logits);  // a regex's first long walk builds its index (timed apart below)
  constexpr int kIters = 200;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) {
    std::fill(logits.begin(), logits.end(), 0.5f);
    c.Mask(logits);
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / kIters;
}

// Drives a constraint through `text` one byte-token at a time (ids of single bytes).
void Feed(pg::runtime::OutputConstraint& c, const pg::runtime::TokenTable& t, const std::string& text) {
  for (char ch : text)
    for (size_t id = 0; id < t.bytes.size(); ++id)
      if (t.bytes[id] == std::string(1, ch) && !t.special[id]) {
        c.Accept(int32_t(id));
        break;
      }
}

}  // namespace

int main() {
  pg::engine::ModelBundle bundle = pg::engine::LoadBundle({.progress_bar = false});
  auto base = pg::engine::MakeTokenTable(*bundle.tokenizer, bundle.eos_ids);
  std::vector<std::string> bytes3;
  std::vector<uint8_t> special3;
  for (int r = 0; r < 3; ++r) {
    bytes3.insert(bytes3.end(), base->bytes.begin(), base->bytes.end());
    special3.insert(special3.end(), base->special.begin(), base->special.end());
  }
  auto big = std::make_shared<const pg::runtime::TokenTable>(
      pg::runtime::TokenTable::Make(std::move(bytes3), std::move(special3), base->eos_ids));
  const char* states[][2] = {{"start", ""}, {"key start", "{"}, {"in a key", "{\"na"}, {"value start", "{\"a\": "},
                             {"in a string value", "{\"a\": \"some te"}, {"in a number", "{\"a\": 12"},
                             {"after a value", "{\"a\": 1"}};
  using Table = std::shared_ptr<const pg::runtime::TokenTable>;
  auto row_of = [&](const char* name, const char* prefix, auto make) {
    double us[2];
    int k = 0;
    for (const Table& t : {base, big}) {
      auto c = make(t);
      Feed(*c, *t, prefix);
      us[k++] = MicrosPerMask(*c, t->bytes.size());
    }
    std::printf("%-22s %9.1f us %9.1f us\n", name, us[0], us[1]);
  };
  auto row = [&](const char* name, const char* prefix, std::shared_ptr<const pg::runtime::JsonSchema> schema) {
    row_of(name, prefix, [&](const Table& t) { return pg::runtime::MakeOutputConstraint(t, schema); });
  };
  std::printf("JSON mode\n%-22s %12s %12s\n", "state", "49152 ids", "147456 ids");
  for (const auto& [name, prefix] : states) row(name, prefix, nullptr);
  auto schema = pg::runtime::JsonSchema::Compile(nlohmann::ordered_json::parse(R"({
      "type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string", "maxLength": 40},
        "role": {"enum": ["admin", "user", "guest"]},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"},
                  "qty": {"type": "integer"}}, "required": ["sku", "qty"]}}},
      "required": ["name", "role", "items"]})"));
  const char* schema_states[][2] = {
      {"start", ""}, {"key start", "{"}, {"in a key", "{\"na"}, {"in a string value", "{\"name\": \"some te"},
      {"after a value", "{\"name\": \"x\""}, {"optional keys", "{\"name\": \"x\", "},
      {"in a bounded string", "{\"name\": \"x\", \"email\": \"a@b"}, {"enum value", "{\"name\": \"x\", \"role\": "},
      {"in an array item", "{\"name\": \"x\", \"role\": \"user\", \"items\": [{\"sku\": \"a\", "}};
  std::printf("a schema\n");
  for (const auto& [name, prefix] : schema_states) row(name, prefix, schema);
  auto patterned = pg::runtime::JsonSchema::Compile(nlohmann::ordered_json::parse(R"({
      "type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3,6}$"},
        "note": {"type": "string", "pattern": "\\S", "maxLength": 200}}, "required": ["id", "note"]})"));
  std::printf("a schema with patterns\n");
  row("in an id (^[A-Z]{2}-\\d{3,6}$)", "{\"id\": \"AB-1", patterned);
  row("in a note (\\S, max 200)", "{\"id\": \"AB-123\", \"note\": \"some te", patterned);
  std::printf("regexes (guided_regex / guided_choice)\n");
  const std::pair<const char*, const char*> regexes[] = {
      {"\\(\\d{3}\\) \\d{3}-\\d{4}", "(55"}, {"[^\\n]{0,200}", "some te"}, {"(\\w+ ){0,20}\\w+\\.", "some te"}};
  for (const auto& [pattern, prefix] : regexes) {
    auto re = pg::runtime::Regex::Compile(pattern, pg::runtime::Regex::Anchoring::kFullMatch);
    std::printf("%s (%zu states)\n", pattern, re->states());
    row_of("  start", "", [&](const Table& t) { return pg::runtime::MakeRegexConstraint(t, re); });
    row_of("  inside", prefix, [&](const Table& t) { return pg::runtime::MakeRegexConstraint(t, re); });
  }
  // Side by side under [^\n]{0,200}: the first mask of a request (a byte-trie walk, which then
  // builds the index), the index build alone, and the masks after it (the index walk).
  for (const Table& t : {base, big}) {
    auto re = pg::runtime::Regex::Compile("[^\\n]{0,200}", pg::runtime::Regex::Anchoring::kFullMatch);
    using ms = std::chrono::duration<double, std::milli>;
    const auto t0 = std::chrono::steady_clock::now();
    auto index = pg::runtime::RegexTokenIndex::Build(*re, *t, false);
    const auto t1 = std::chrono::steady_clock::now();
    auto c = pg::runtime::MakeRegexConstraint(t, re);
    std::vector<float> logits(t->bytes.size(), 0.5f);
    const auto t2 = std::chrono::steady_clock::now();
    c->Mask(logits);
    const auto t3 = std::chrono::steady_clock::now();
    const double steady = MicrosPerMask(*c, t->bytes.size()) / 1000.0;
    const double walk = ms(t3 - t2).count() - ms(t1 - t0).count();
    std::printf("%zu ids: byte-trie walk %.2f ms (first mask %.2f ms - index build %.2f ms, %zu nodes), "
                "index walk %.3f ms: %.0fx\n", t->bytes.size(), walk, ms(t3 - t2).count(), ms(t1 - t0).count(),
                index->nodes(), steady, walk / steady);
  }
  auto choice = pg::runtime::Regex::Choice({"positive", "negative", "neutral", "mixed"});
  row_of("choice of 4: start", "", [&](const Table& t) { return pg::runtime::MakeRegexConstraint(t, choice); });
  // GBNF grammars (guided_grammar / grammar): a JSON grammar at the states above, and a
  // free-text list.
  std::printf("grammars (guided_grammar / grammar)\n");
  auto json_grammar = pg::runtime::Grammar::Compile(pg::runtime::kJsonGbnf);

  for (const auto& [name, prefix] : states)
    row_of(name, prefix, [&](const Table& t) { return pg::runtime::MakeGrammarConstraint(t, json_grammar); });
  auto list = pg::runtime::Grammar::Compile("root ::= (\"- \" [^\\n]+ \"\\n\")+");
  row_of("list: in an item", "- some te", [&](const Table& t) { return pg::runtime::MakeGrammarConstraint(t, list); });
  // The host sampler after the mask (what a constrained row costs beyond it), T = 0.8 and
  // greedy, on a row where the mask kept few tokens and on a full row.
  for (const auto& t : {base, big}) {
    auto c = pg::runtime::MakeOutputConstraint(t, schema);
    std::vector<float> masked(t->bytes.size()), full(t->bytes.size());
    std::mt19937 rng(7);  // logits ~ N(0, 3), a spread like a model's: top_p keeps few tokens
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (float& v : full) v = normal(rng);
    masked = full;
    c->Mask(masked);
    for (const float temperature : {0.8f, 0.0f, 0.7f, 0.6f}) {
      pg::ops::SampleRow r;
      r.temperature = temperature;
      if (temperature == 0.7f) r.top_p = 0.9f;  // the truncated paths
      if (temperature == 0.6f) r.min_p = 0.05f, r.top_k = 50;
      for (const auto* row_logits : {&masked, &full}) {
        constexpr int kIters = 50;
        int32_t sink = 0;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kIters; ++i) sink += pg::ops::ChooseToken(*row_logits, r, 0.37);
        const auto t1 = std::chrono::steady_clock::now();
        std::printf("ChooseToken T=%.1f top_p=%.1f min_p=%.2f top_k=%d %-6s %6zu ids: %7.1f us (%d)\n",
                    temperature, r.top_p, r.min_p, r.top_k,
                    row_logits == &masked ? "masked" : "full", t->bytes.size(),
                    std::chrono::duration<double, std::micro>(t1 - t0).count() / kIters, sink % 2);
      }
    }
  }
  return 0;
}
