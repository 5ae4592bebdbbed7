// Grammars (runtime/grammar.h) against independent oracles: random regular grammars against
// the same language written as a regex (runtime/regex.h, itself checked against std::regex),
// prefix by prefix; a JSON grammar against nlohmann::json on generated and mutated texts;
// balanced brackets against a counter; the refusals with their positions; and
// ByteConstraint<GrammarMatcher>'s mask against Allowed() token by token on seeded walks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "mask_checks.h"
#include "unit/runtime/json_gbnf.h"
#include "runtime/grammar.h"
#include "runtime/regex.h"
#include "runtime/sampler.h"

namespace pg::runtime {
namespace {

// Feeds `text`; -1 if every byte was accepted and the grammar may end there, else the number
// of bytes accepted before the first refusal (text.size() when all were but it cannot end).
int64_t Feed(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  for (size_t i = 0; i < text.size(); ++i)
    if (!m.Accept(uint8_t(text[i]))) return int64_t(i);
  return m.can_end() ? -1 : int64_t(text.size());
}
// The same for a regex (full match): its dead states are pruned, so a live state can end.
int64_t Feed(const Regex& re, const std::string& text) {
  int32_t s = re.start();
  for (size_t i = 0; i < text.size(); ++i) {
    s = re.Next(s, uint8_t(text[i]));
    if (s == Regex::kDead) return int64_t(i);
  }
  return re.accepting(s) ? -1 : int64_t(text.size());
}

std::string CompileError(const std::string& text) {
  try {
    Grammar::Compile(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

// A random expression written twice: GBNF and regex, over a, b, c and é.
class ExprGen {
 public:
  explicit ExprGen(uint64_t seed) : rng_(seed) {}
  std::pair<std::string, std::string> Alt(int depth) {
    std::string g, r;
    const int n = 1 + Pick(depth > 0 ? 3 : 1);
    for (int i = 0; i < n; ++i) {
      auto [sg, sr] = Seq(depth);
      g += (i ? " | " : "") + sg;
      r += (i ? "|" : "") + sr;
    }
    return {g, r};
  }

 private:
  int Pick(int n) { return int(rng_() % uint64_t(n)); }
  std::pair<std::string, std::string> Seq(int depth) {
    std::string g, r;
    const int n = Pick(4);
    if (n == 0) return {"\"\"", ""};
    for (int i = 0; i < n; ++i) {
      auto [ag, ar] = Quant(depth);
      g += " " + ag;
      r += ar;
    }
    return {g, r};
  }
  std::pair<std::string, std::string> Quant(int depth) {
    auto [g, r] = Atom(depth);
    switch (Pick(7)) {
      case 0: return {g + "*", "(?:" + r + ")*"};
      case 1: return {g + "+", "(?:" + r + ")+"};
      case 2: return {g + "?", "(?:" + r + ")?"};
      case 3: {
        const int m = Pick(3), k = m + Pick(3);
        return {g + "{" + std::to_string(m) + "," + std::to_string(k) + "}",
                "(?:" + r + "){" + std::to_string(m) + "," + std::to_string(k) + "}"};
      }
      default: return {g, r};
    }
  }
  std::pair<std::string, std::string> Atom(int depth) {
    switch (Pick(depth > 0 ? 7 : 5)) {
      case 0: case 1: {
        const std::string c(1, char('a' + Pick(3)));
        return {"\"" + c + "\"", c};
      }
      case 2: return {"\"ab\"", "ab"};
      case 3: {
        static const char* kClasses[][2] = {{"[ab]", "[ab]"}, {"[^a]", "[^a]"}, {"[a-c]", "[a-c]"},
                                            {"[\\u00e9c]", "[\\u00e9c]"}, {"[^\\u00e9]", "[^\\u00e9]"}};
        const int k = Pick(5);
        return {kClasses[k][0], kClasses[k][1]};
      }
      case 4: return {"\"\\u00e9\"", "\\u00e9"};
      default: {
        auto [g, r] = Alt(depth - 1);
        return {"(" + g + ")", "(?:" + r + ")"};
      }
    }
  }
  std::mt19937_64 rng_;
};

TEST(Grammar, RegularGrammarsAgreeWithTheSameRegexOnEveryPrefix) {
  std::mt19937_64 rng(42);
  const std::vector<std::string> alphabet = {"a", "b", "c", "\xc3\xa9", "d", "\n", "\xc3"};
  int matched = 0;
  for (uint64_t k = 0; k < 300; ++k) {
    ExprGen gen(k);
    auto [g_text, r_text] = gen.Alt(2);
    // Half through a named helper rule, so references are exercised too.
    const std::string grammar = k % 2 ? "root ::= " + g_text + "\n" : "root ::= x\nx ::= " + g_text + "\n";
    auto g = Grammar::Compile(grammar);
    auto re = Regex::Compile(r_text, Regex::Anchoring::kFullMatch);
    for (int t = 0; t < 40; ++t) {
      std::string text;
      const int len = int(rng() % 7);
      for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
      const int64_t want = Feed(*re, text), got = Feed(g, text);
      ASSERT_EQ(got, want) << "grammar: " << grammar << "regex: " << r_text << "\ntext: '" << text << "'";
      matched += want == -1;
    }
  }
  EXPECT_GT(matched, 500);  // both outcomes well exercised
}


nlohmann::json RandomValue(std::mt19937_64& rng, int depth) {
  switch (rng() % (depth > 0 ? 7 : 5)) {
    case 0: return nullptr;
    case 1: return bool(rng() % 2);
    case 2: return int64_t(rng() % 2000) - 1000;
    case 3: return double(int64_t(rng() % 100000) - 50000) / 64.0;
    case 4: {
      static const char* kStrings[] = {"", "a", "q\"uote", "back\\slash", "tab\t", "\xc3\xa9t\xc3\xa9", "\x01", "x y z"};
      return kStrings[rng() % 8];
    }
    case 5: {
      nlohmann::json a = nlohmann::json::array();
      for (uint64_t i = rng() % 4; i > 0; --i) a.push_back(RandomValue(rng, depth - 1));
      return a;
    }
    default: {
      nlohmann::json o = nlohmann::json::object();
      for (uint64_t i = rng() % 4; i > 0; --i) o["k" + std::to_string(rng() % 10)] = RandomValue(rng, depth - 1);
      return o;
    }
  }
}

TEST(Grammar, JsonGrammarAgreesWithNlohmannOnValidAndMutatedTexts) {
  auto g = Grammar::Compile(kJsonGbnf);
  std::mt19937_64 rng(7);
  const std::string kMutations = "{}[]\",:0123456789.-+eEtrufalsn \\u";
  int valid = 0, invalid = 0;
  for (int k = 0; k < 1500; ++k) {
    const nlohmann::json v = RandomValue(rng, 3);
    std::string text = v.dump(rng() % 3 == 0 ? 1 : -1);
    if (k % 2) {  // mutate one to three bytes
      for (uint64_t m = 1 + rng() % 3; m > 0 && !text.empty(); --m) {
        const size_t at = rng() % text.size();
        switch (rng() % 3) {
          case 0: text[at] = kMutations[rng() % kMutations.size()]; break;
          case 1: text.erase(at, 1); break;
          default: text.insert(at, 1, kMutations[rng() % kMutations.size()]);
        }
      }
    }
    const bool ok = nlohmann::json::accept(text);
    EXPECT_EQ(Feed(g, text) == -1, ok) << "'" << text << "'";
    (ok ? valid : invalid) += 1;
  }
  EXPECT_GT(valid, 700);
  EXPECT_GT(invalid, 300);
}

TEST(Grammar, BalancedBracketsAgreeWithACounter) {
  auto g = Grammar::Compile("root ::= (\"(\" root \")\" | \"[\" root \"]\")*");
  std::mt19937_64 rng(3);
  for (int k = 0; k < 3000; ++k) {
    std::string text;
    for (int i = int(rng() % 12); i > 0; --i) text += "()[]"[rng() % 4];
    // Oracle: a stack of open brackets; the first byte that closes the wrong one (or none) is
    // where the prefix dies; complete iff the stack is empty at the end.
    std::string stack;
    int64_t want = -2;
    for (size_t i = 0; i < text.size() && want == -2; ++i) {
      const char c = text[i];
      if (c == '(' || c == '[') stack += c;
      else if (!stack.empty() && stack.back() == (c == ')' ? '(' : '[')) stack.pop_back();
      else want = int64_t(i);
    }
    if (want == -2) want = stack.empty() ? -1 : int64_t(text.size());
    ASSERT_EQ(Feed(g, text), want) << text;
  }
}

TEST(Grammar, MalformedGrammarsAreRefusedWithTheirPosition) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty"},
      {"rot ::= \"a\"", "no 'root' rule"},
      {"root ::= item\n", "undefined rule 'item'"},
      {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
      {"root ::= \"abc", "unterminated literal"},
      {"root ::= [a-", "unterminated"},
      {"root ::= [z-a]", "out of order"},
      {"root ::= \"\\q\"", "unknown escape"},
      {"root ::= (\"a\" | \"b\"", "expected ')'"},
      {"root ::= \"a\"{2,1}", "n < m"},
      {"root ::= \"a\"{1001}", "above 1000"},
      {"root ::= root \"a\" | \"b\"", "left-recursive"},
      {"root ::= x\nx ::= \"\"? root \"a\" | \"b\"", "left-recursive"},
      {"root ::= \"a\" root", "can never finish"},
      {"root = \"a\"", "expected '::='"},
      {"root ::= \"a\" ; \"b\"", "unexpected ';'"},
      {"root ::= \"\\ud800\"", "not a Unicode scalar value"},
  };
  for (const auto& [text, want] : cases) {
    const std::string err = CompileError(text);
    EXPECT_NE(err.find(want), std::string::npos) << text << " -> '" << err << "'";
  }
  EXPECT_NE(CompileError("root ::= \"a\"\n  \"b\" )").find("line 2 column 7"), std::string::npos)
      << CompileError("root ::= \"a\"\n  \"b\" )");
}

// An ambiguous grammar whose determinized automaton would need 2^16 states: the matcher stops
// making states at its cap (memory stays bounded) and stays exact below it.
TEST(Grammar, AutomatonStatesAreCapped) {
  auto g = Grammar::Compile("root ::= [ab]* \"a\" [ab]{15}");
  std::mt19937_64 rng(5);
  GrammarMatcher m(g);
  size_t accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    GrammarMatcher probe = m;
    if (!probe.Accept(uint8_t("ab"[rng() % 2]))) break;
    m = probe;
    ++accepted;
  }
  EXPECT_LE(m.num_dfa_states(), size_t(65536));
  EXPECT_GT(accepted, size_t(1000));
  EXPECT_EQ(Feed(g, "bbbabababababababab"), -1);  // a fresh matcher: exact
}

TEST(Grammar, SyntaxForms) {
  auto g = Grammar::Compile(
      "root ::= greeting ' ' name ('!' | \"?\"){0,2}  # comment\n"
      "greeting ::=\n  \"hi\" |\n  \"hello\"\n"
      "name ::= [A-Z] [a-z]{1,5} .?\n");
  for (const char* ok : {"hi Bob", "hello Alice!?", "hi Zoe\xc3\xa9", "hi Ann!!", "hi Bo7"})
    EXPECT_EQ(Feed(g, ok), -1) << ok;
  for (const char* bad : {"hi bob", "hey Bob", "hi Bob!!!!", "hi B", "hello Alexander"})
    EXPECT_NE(Feed(g, bad), -1) << bad;
}

std::shared_ptr<const TokenTable> Table() {
  std::vector<std::string> pieces = {"</s>", "<|im_end|>"};
  for (int c = 0x20; c < 0x7f; ++c) pieces.push_back(std::string(1, char(c)));
  for (const char* p : {"{\"", "\":", "\",", "true", "false", "null", "12", "-0", ".5", "e+", "\\u00", "\xc3",
                        "\xa9", "\xc3\xa9", "\n", "  ", "[]", "{}", "\"}", "]}", "name", "age"})
    pieces.push_back(p);
  std::vector<uint8_t> special(pieces.size(), 0);
  special[0] = special[1] = 1;
  return std::make_shared<const TokenTable>(TokenTable::Make(pieces, special, {0}));
}

TEST(GrammarConstraint, SeededWalksEndInSentencesAndTheMaskIsExact) {
  auto table = Table();
  const char* grammars[] = {
      kJsonGbnf,
      "root ::= (\"yes\" | \"no\") (\", \" (\"yes\" | \"no\")){0,3}",
      "root ::= item+\nitem ::= \"- \" [a-z ]{1,10} \"\\n\"",
  };
  for (const char* text : grammars) {
    auto g = Grammar::Compile(text);
    int ended = 0;
    for (uint64_t seed = 0; seed < 25; ++seed) {
      SamplingParams p;
      p.token_table = table;
      p.grammar = g;
      const Walk w = CheckedWalk(p, seed, 80, [](std::vector<float>& row) { row[0] = 3.0f; }, text);
      if (!w.ended) continue;
      ++ended;
      EXPECT_EQ(Feed(g, w.text), -1) << text << " -> '" << w.text << "'";
    }
    EXPECT_GE(ended, 10) << text;
  }
}

}  // namespace
}  // namespace pg::runtime
