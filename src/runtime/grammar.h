// Context-free grammars for constrained output, in GBNF: llama.cpp's grammar format (its
// server's `grammar` field), which is also the EBNF that vLLM's `guided_grammar` passes to
// xgrammar. The whole output must be a sentence of the grammar's `root` rule, then EOS.
//
//   root   ::= answer ("," ws answer)*     # comments run to the end of the line
//   answer ::= "yes" | "no" | [0-9]+ | name
//   name   ::= [A-Za-z_] [A-Za-z0-9_]{0,15}
//   ws     ::= [ \t\n]*
//
// Terminals: "literals" and 'literals' (escapes \n \r \t \\ \" \' \[ \] \xHH \uHHHH
// \UHHHHHHHH), character classes [a-z], [^"\\] over code points, `.` (any code point);
// grouping ( ... ), alternatives |, postfix * + ? {m} {m,} {m,n} {,n} (bounds up to 1000).
// A rule's body runs to the next `name ::=`, so alternatives may span lines freely. Refused
// with the line and column: undefined rules, a missing root, left recursion (a rule that can
// reach itself before consuming a byte), malformed syntax.
//
// Compiled to a byte-level program: code point classes become the UTF-8 byte sequences that
// encode them, groups and repetitions become rules of their own. GrammarMatcher runs it as a
// pushdown automaton whose sets of stacks are interned into a lazily built DFA, one per
// request, so the mask's trie walk costs one table lookup per byte already seen.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/token_mask.h"

namespace pg::runtime {

class Grammar {
 public:
  static constexpr int kMaxRepeat = 1000;
  static constexpr size_t kMaxElements = 1 << 20;  // after expansion of repetitions

  // Throws pg::Error(kInvalidArgument) naming the line and column of the problem.
  static std::shared_ptr<const Grammar> Compile(std::string_view text);

  // The program. An alternative is a run of elements ended by kEnd; kBytes matches one byte
  // of sets[arg]; kRule expands rule arg (one of its alternatives).
  enum class Op : uint8_t { kEnd, kBytes, kRule };
  struct Elem {
    Op op = Op::kEnd;
    int32_t arg = 0;
  };
  using ByteSet = std::array<uint64_t, 4>;
  static bool Has(const ByteSet& s, uint8_t c) { return (s[c >> 6] >> (c & 63)) & 1; }

  std::vector<Elem> elems;
  std::vector<std::vector<int32_t>> rules;  // rule -> start positions of its alternatives
  std::vector<std::string> rule_names;      // named rules first; generated ones "name#k"
  std::vector<ByteSet> sets;
  int32_t root = 0;
};

class GrammarDfa;  // the lazily built automaton of one request (grammar_matcher.cpp)

// Prefixes of the grammar's language (token_mask.h's matcher interface). Copies share the
// request's automaton (built on the engine thread only).
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);
  bool Accept(uint8_t c);
  bool can_end() const;
  int string_budget() const { return -1; }
  int64_t mask_key() const { return state_; }  // the DFA state: it alone decides the tokens
  size_t num_dfa_states() const;  // for tests and benchmarks

 private:
  std::shared_ptr<GrammarDfa> dfa_;
  int32_t state_ = 0;
};

std::unique_ptr<OutputConstraint> MakeGrammarConstraint(std::shared_ptr<const TokenTable> table,
                                                       std::shared_ptr<const Grammar> grammar);

}  // namespace pg::runtime
