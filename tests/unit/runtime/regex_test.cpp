// Regex (runtime/regex.h): random patterns of the supported syntax against std::regex
// (ECMAScript, an independent engine) on random texts, in both anchorings; code point classes
// against their ranges on every code point; malformed UTF-8 refused; the refusals; guided
// choices; and ByteConstraint<RegexMatcher>'s mask against Allowed() token by token, with
// seeded walks whose ended outputs must match.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "core/status.h"
#include "mask_checks.h"
#include "runtime/json_schema.h"
#include "runtime/regex_constraint.h"
#include "runtime/sampler.h"

namespace pg::runtime {
namespace {

using Anchoring = Regex::Anchoring;

std::string CompileError(const std::string& pattern, Anchoring a = Anchoring::kFullMatch) {
  try {
    Regex::Compile(pattern, a);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

// A random pattern over a, b, c: literals, '.', classes, \d-style escapes, groups,
// alternation and every quantifier form; `^` / `$` only where runtime/regex.h allows them.
class PatternGen {
 public:
  explicit PatternGen(uint64_t seed) : rng_(seed) {}
  std::string Top() {
    std::string p;
    const int alts = 1 + Pick(2);
    for (int i = 0; i < alts; ++i) {
      if (i) p += '|';
      if (Pick(3) == 0) p += '^';
      p += Seq(1);
      if (Pick(3) == 0) p += '$';
    }
    return p;
  }

 private:
  int Pick(int n) { return int(rng_() % uint64_t(n)); }
  // Inside a group (depth 0) atoms are unquantified and groups do not nest: std::regex
  // backtracks, and nested quantifiers (a*)* make it exponential.
  std::string Seq(int depth) {
    std::string s;
    const int n = Pick(4);
    for (int i = 0; i < n; ++i) s += depth > 0 ? Quant(Atom(depth)) : Atom(depth);
    return s;
  }
  std::string Atom(int depth) {
    switch (Pick(depth > 0 ? 8 : 6)) {
      case 0: case 1: case 2: return std::string(1, char('a' + Pick(3)));
      case 3: return ".";
      case 4: {
        static const char* kClasses[] = {"[ab]", "[^a]", "[a-c]", "[^bc\\n]", "[\\w]", "\\s", "\\W", "[b-c]"};
        return kClasses[Pick(8)];
      }
      case 5: return "\\n";
      default: {
        std::string g = Pick(2) ? "(" : "(?:";
        const int alts = 1 + Pick(3);
        for (int i = 0; i < alts; ++i) {
          if (i) g += '|';
          g += Seq(depth - 1);
        }
        return g + ")";
      }
    }
  }
  std::string Quant(std::string atom) {
    static const char* kQuants[] = {"", "", "", "*", "+", "?", "{2}", "{1,3}", "{0,}", "*?", "{0,2}?"};
    return atom + kQuants[Pick(11)];
  }
  std::mt19937_64 rng_;
};

TEST(Regex, AgreesWithStdRegexOnRandomPatternsAndTexts) {
  std::mt19937_64 rng(7);
  const char kAlphabet[] = {'a', 'b', 'c', 'd', '\n', ' '};
  int patterns = 0, matches = 0, checked = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const std::string p = PatternGen(seed).Top();
    const std::regex oracle(p, std::regex::ECMAScript);
    auto full = Regex::Compile(p, Anchoring::kFullMatch);
    auto search = Regex::Compile(p, Anchoring::kSearch);
    ++patterns;
    for (int t = 0; t < 60; ++t) {
      std::string text;
      for (int n = int(rng() % 7); n > 0; --n) text += kAlphabet[rng() % 6];
      const bool want_full = std::regex_match(text, oracle);
      const bool want_search = std::regex_search(text, oracle);
      ASSERT_EQ(full->FullMatch(text), want_full) << "pattern /" << p << "/ on '" << text << "'";
      ASSERT_EQ(search->FullMatch(text), want_search) << "search /" << p << "/ on '" << text << "'";
      matches += want_full + want_search;
      ++checked;
    }
  }
  EXPECT_EQ(patterns, 400);
  EXPECT_GT(matches, checked / 10);  // the texts do reach matches, not only refusals
}

// Every prefix the automaton accepts continues to a match: it refuses a byte as soon as no
// text of the language can follow (a live state can always end).
TEST(Regex, EveryLiveStateCanStillEnd) {
  auto re = Regex::Compile("(ab|a[0-9]{3}x)+", Anchoring::kFullMatch);
  for (int32_t s = 0; s < int32_t(re->states()); ++s) {
    // Breadth-first from s over all bytes: an accepting state must be reachable if s is
    // reachable from the start at all.
    std::vector<uint8_t> seen(re->states(), 0);
    std::vector<int32_t> q = {s};
    seen[size_t(s)] = 1;
    bool can_end = false;
    for (size_t i = 0; i < q.size() && !can_end; ++i) {
      can_end = re->accepting(q[i]);
      for (int c = 0; c < 256; ++c)
        if (int32_t t = re->Next(q[i], uint8_t(c)); t >= 0 && !seen[size_t(t)]) seen[size_t(t)] = 1, q.push_back(t);
    }
    EXPECT_TRUE(can_end) << "state " << s;
  }
  EXPECT_TRUE(re->FullMatch("aba123x"));
  auto prefix = [&](std::string_view text) {
    int32_t s = re->start();
    for (size_t i = 0; i < text.size(); ++i)
      if ((s = re->Next(s, uint8_t(text[i]))) == Regex::kDead) return i;
    return text.size();
  };
  EXPECT_EQ(prefix("a12y"), 3u);
  EXPECT_EQ(prefix("ac"), 1u);
}

std::string Utf8(uint32_t cp) {
  char b[4];
  size_t n = 0;
  if (cp < 0x80) {
    b[n++] = char(cp);
  } else if (cp < 0x800) {
    b[n++] = char(0xC0 | cp >> 6);
  } else if (cp < 0x10000) {
    b[n++] = char(0xE0 | cp >> 12);
    b[n++] = char(0x80 | (cp >> 6 & 0x3F));
  } else {
    b[n++] = char(0xF0 | cp >> 18);
    b[n++] = char(0x80 | (cp >> 12 & 0x3F));
    b[n++] = char(0x80 | (cp >> 6 & 0x3F));
  }
  if (cp >= 0x80) b[n++] = char(0x80 | (cp & 0x3F));
  return std::string(b, n);
}

TEST(Regex, CodePointClassesMatchExactlyTheirRanges) {
  struct Case {
    const char* pattern;
    bool (*in)(uint32_t);
  };
  const Case cases[] = {
      {"[\\u00e0-\\u07ff\\u{1F600}-\\u{1F64F}x]", [](uint32_t c) { return (c >= 0xE0 && c <= 0x7FF) || (c >= 0x1F600 && c <= 0x1F64F) || c == 'x'; }},
      {"[^\\u0080-\\uffff]", [](uint32_t c) { return c < 0x80 || c > 0xFFFF; }},
      {".", [](uint32_t c) { return c != '\n' && c != '\r' && c != 0x2028 && c != 0x2029; }},
      {"\\S", [](uint32_t c) { return !((c >= 9 && c <= 13) || c == ' ' || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
                                        c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF); }},
      {"[\\u0800-\\u{10000}]", [](uint32_t c) { return c >= 0x800 && c <= 0x10000; }},
  };
  for (const Case& k : cases) {
    auto re = Regex::Compile(k.pattern, Anchoring::kFullMatch);
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x20000 ? 1 : 97)) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      ASSERT_EQ(re->FullMatch(Utf8(cp)), k.in(cp)) << k.pattern << " U+" << std::hex << cp;
    }
    // Encodings that are not UTF-8 never match: overlong forms, encoded surrogates, stray
    // continuation bytes, past U+10FFFF.
    for (const char* bad : {"\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\x80", "\xF4\x90\x80\x80", "\xF8\x88\x80\x80\x80"})
      EXPECT_FALSE(re->FullMatch(bad)) << k.pattern;
  }
}

TEST(Regex, RefusesWhatItDoesNotSupportWithThePosition) {
  const std::pair<const char*, const char*> cases[] = {
      {"(a)\\1", "backreferences"},
      {"a(?=b)", "lookaround"},
      {"(?i)abc", "inline flags"},
      {"\\bword", "word boundaries"},
      {"\\p{L}+", "Unicode property"},
      {"a^b", "'^'"},
      {"(a$)", "'$'"},
      {"a$b", "'$'"},
      {"(ab", "without its ')'"},
      {"ab)", "unmatched ')'"},
      {"[ab", "without its ']'"},
      {"*a", "nothing to repeat"},
      {"a{3,2}", "above its maximum"},
      {"a{1001}", "repeat count above 1000"},
      {"[z-a]", "out of order"},
      {"\\q", "unknown escape"},
      {"a++", "possessive"},
      {"[^\\s\\S]", "matches no character"},
      {"\xff", "not valid UTF-8"},
      {"[a-\\d]", "class escape"},
  };
  for (const auto& [pattern, want] : cases) {
    const std::string err = CompileError(pattern);
    EXPECT_NE(err.find(want), std::string::npos) << pattern << " -> '" << err << "'";
    EXPECT_NE(err.find("position"), std::string::npos) << pattern << " -> '" << err << "'";
  }
  EXPECT_NE(CompileError("(.{0,1000}){1000}").find("too large"), std::string::npos);
  EXPECT_NE(CompileError("[ab]*a[ab]{15}").find("automaton states"), std::string::npos);  // 2^16 subsets
  // A short pattern must not buy seconds of CPU on the request's thread (this one took 2.3 s
  // before the work bound).
  EXPECT_NE(CompileError("(\\w+\\s?){0,1000}").find("too complex"), std::string::npos);
  // Braces that do not form a quantifier are literals, as in ECMAScript and Python.
  EXPECT_TRUE(Regex::Compile("a{,2}", Anchoring::kFullMatch)->FullMatch("a{,2}"));
  EXPECT_TRUE(Regex::Compile("x{y}", Anchoring::kFullMatch)->FullMatch("x{y}"));
}

TEST(Regex, ChoiceIsExactlyOneOfTheStrings) {
  auto re = Regex::Choice({"yes", "no", "not sure", "n\xc3\xa9"});
  for (const char* ok : {"yes", "no", "not sure", "n\xc3\xa9"}) EXPECT_TRUE(re->FullMatch(ok)) << ok;
  for (const char* bad : {"", "ye", "yes ", "not", "n", "maybe"}) EXPECT_FALSE(re->FullMatch(bad)) << bad;
  EXPECT_TRUE(Regex::Choice({""})->FullMatch(""));
}

std::shared_ptr<const TokenTable> Table() {
  std::vector<std::string> pieces = {"</s>", "<|im_end|>"};
  for (int c = 0x20; c < 0x7f; ++c) pieces.push_back(std::string(1, char(c)));
  for (const char* p : {"20", "2024", "-0", "-1", "12-", "ab", "abc", "\xc3", "\xa9", "\xc3\xa9", "\n", "  ", "@example", ".com"})
    pieces.push_back(p);
  std::vector<uint8_t> special(pieces.size(), 0);
  special[0] = special[1] = 1;
  return std::make_shared<const TokenTable>(TokenTable::Make(pieces, special, {0}));
}

TEST(RegexConstraint, SeededWalksEndInMatchesAndTheMaskIsExact) {
  const char* patterns[] = {
      "\\d{4}-\\d{2}-\\d{2}",
      "[a-z]{2,8}@example\\.com",
      "(yes|no|maybe)( \\(\\d+%\\))?",
      "[^\\n]{1,12}",
      "(ab|c)+\\.?",
  };
  auto table = Table();
  for (const char* pattern : patterns) {
    auto re = Regex::Compile(pattern, Anchoring::kFullMatch);
    const std::regex oracle(pattern, std::regex::ECMAScript);
    int ended_walks = 0;
    for (uint64_t seed = 0; seed < 30; ++seed) {
      SamplingParams p;
      p.token_table = table;
      p.regex = re;
      const Walk w = CheckedWalk(p, seed, 60, [](std::vector<float>& row) { row[0] = 2.0f; }, pattern);
      const std::string& out = w.text;
      const bool ended = w.ended;
      if (!ended) continue;
      ++ended_walks;
      EXPECT_TRUE(re->FullMatch(out)) << pattern << " -> '" << out << "'";
      const bool ascii = std::all_of(out.begin(), out.end(), [](char c) { return uint8_t(c) < 0x80; });
      if (ascii) {  // std::regex counts bytes: equal to code points only here
        EXPECT_TRUE(std::regex_match(out, oracle)) << pattern << " -> '" << out << "'";
      }
    }
    EXPECT_GE(ended_walks, 20) << pattern;
  }
}

// A vocabulary large enough that permissive patterns take the class index (RegexTokenIndex)
// after their first byte-trie walk: random pieces of letters, digits, spaces, punctuation,
// quotes, backslashes, newlines and 2-3 byte code points (and their stray halves).
std::shared_ptr<const TokenTable> BigTable() {
  static const char* kAtoms[] = {"a", "b", "e", "z", "Q", "0", "7", " ", ".", "-", "\"", "\\", "\n", "{", "\xc3\xa9",
                                 "\xe2\x82\xac", "\xc3", "\xa9", "_", "u", "00", "\\u", "\\n"};
  std::mt19937_64 rng(11);
  std::vector<std::string> pieces = {"</s>", "<pad>"};
  for (int i = 0; i < 30000; ++i) {
    std::string p;
    for (int n = 1 + int(rng() % 6); n > 0; --n) p += kAtoms[rng() % std::size(kAtoms)];
    pieces.push_back(p);
  }
  std::vector<uint8_t> special(pieces.size(), 0);
  special[0] = special[1] = 1;
  return std::make_shared<const TokenTable>(TokenTable::Make(pieces, special, {0}));
}

// The index path's mask equals Allowed() token by token, at every step of seeded walks, for
// top-level regexes and for pattern strings inside a schema (plain tokens by index, the others
// one by one, within maxLength).
TEST(RegexConstraint, TheClassIndexMasksExactly) {
  auto table = BigTable();
  // Also: the index path did run (a walk under these patterns takes > 20K steps of the byte
  // trie first).
  auto check_walks = [&](SamplingParams p, const std::string& what, auto&& indexes_built) {
    p.token_table = table;
    for (uint64_t seed = 0; seed < 4; ++seed)
      CheckedWalk(p, seed, 12, [](std::vector<float>&) {}, what,
                  [&](const OutputConstraint& c) { EXPECT_GT(indexes_built(c), 0u) << what << ": the index never ran"; });
  };
  for (const char* pattern : {"[^\\n]{0,40}", "[^{]*[^{ ]", "(\\S+ ){0,30}\\S*\\u00e9?"}) {
    SamplingParams p;
    p.token_table = table;
    p.regex = Regex::Compile(pattern, Regex::Anchoring::kFullMatch);
    check_walks(p, pattern, [](const OutputConstraint& c) {
      return dynamic_cast<const RegexConstraint&>(c).regex_indexes_built();
    });
  }
  for (const char* schema : {R"({"type": "string", "pattern": "\\S", "maxLength": 12})",
                             R"({"type": "string", "pattern": "^[^{]*$", "minLength": 2})"}) {
    SamplingParams p;
    p.token_table = table;
    p.json_schema = JsonSchema::Compile(nlohmann::ordered_json::parse(schema));
    check_walks(p, schema, [](const OutputConstraint& c) {
      return dynamic_cast<const SchemaConstraint&>(c).regex_indexes_built();
    });
  }
}

}  // namespace
}  // namespace pg::runtime
