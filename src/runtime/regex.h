// Regular expressions for constrained output: vLLM's guided_regex / guided_choice and JSON
// Schema's `pattern`. A pattern is compiled to a deterministic automaton over UTF-8 bytes, so a
// matcher is one state number and a byte is one table lookup (ByteConstraint masks with it).
//
// Syntax (the common subset of ECMAScript and Python): literals; `.` (any code point but
// \n \r U+2028 U+2029); classes `[a-z_]`, `[^...]` with ranges and the escapes below; \d \D
// \w \W \s \S (ASCII digits and word characters, ECMAScript's white space); \t \n \r \f \v \0
// \xHH \uHHHH \u{H...}; an escaped punctuation character; groups `(...)`, `(?:...)`,
// `(?<name>...)`, `(?P<name>...)` (nothing is captured); `|`; quantifiers * + ? {n} {n,}
// {n,m} (bounds up to kMaxRepeat) and their lazy forms (same language). `^` and `$` only at the
// start / end of a top-level alternative. Refused with the position and what was found:
// backreferences, lookaround, word boundaries, Unicode property classes, inline flags.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pg::runtime {

class Regex {
 public:
  // kFullMatch: the whole text must match (guided_regex; `^` / `$` change nothing).
  // kSearch: the pattern may match anywhere in the text (JSON Schema's `pattern`): an
  // alternative without `^` may be preceded by anything, one without `$` followed by anything.
  enum class Anchoring : uint8_t { kFullMatch, kSearch };
  static constexpr int32_t kDead = -1;
  static constexpr int kMaxRepeat = 1000;
  static constexpr int32_t kMaxStates = 65535;  // SchemaMatcher keeps a state in 16 bits

  // Throws pg::Error(kInvalidArgument) naming the problem and its position (in code points),
  // for a pattern outside the syntax above, one that matches nothing, or one whose automaton
  // would need more than kMaxStates states.
  static std::shared_ptr<const Regex> Compile(std::string_view pattern, Anchoring anchoring);
  // Exactly one of `choices` (raw bytes each; guided_choice). At least one choice.
  static std::shared_ptr<const Regex> Choice(const std::vector<std::string>& choices);

  int32_t start() const { return 0; }
  // The state after byte c, kDead when no text of the language continues with it (states
  // from which no accepting state can be reached are dead too: a live state can always end).
  int32_t Next(int32_t state, uint8_t c) const { return NextClass(state, byte_class_[c]); }
  // Bytes of one class lead every state to the same state; a class holds UTF-8 continuation
  // bytes only or none of them. RegexTokenIndex walks tokens by class.
  uint8_t byte_class(uint8_t c) const { return byte_class_[c]; }
  size_t classes() const { return classes_; }
  int32_t NextClass(int32_t state, uint8_t cls) const { return next_[size_t(state) * classes_ + cls]; }
  bool accepting(int32_t state) const { return accept_[size_t(state)] != 0; }
  // The fewest code points (UTF-8 lead bytes) that take a live state to a match: 0 when
  // accepting (a length bound checks what a pattern still needs).
  uint32_t min_chars(int32_t state) const { return min_chars_[size_t(state)]; }
  bool FullMatch(std::string_view text) const;
  // The fewest code points that take `state` to a match through a first code point of the
  // BMP (U+0000..U+FFFF, what a \\uXXXX escape writes), that one included; UINT32_MAX when
  // none leads to a live state.
  uint32_t min_chars_via_bmp(int32_t state) const { return min_chars_via_bmp_[size_t(state)]; }
  // Some code point in [lo, hi] (surrogates excluded), written as UTF-8 from `state`, leaves a
  // live state that needs at most `chars_left` more code points (a \\u escape's hex digits so
  // far: the code points they can still become).
  bool AnyCodePointFits(int32_t state, uint32_t lo, uint32_t hi, uint32_t chars_left) const;
  size_t states() const { return accept_.size(); }

 private:
  friend class RegexBuilder;
  uint8_t byte_class_[256] = {};   // bytes no part of the pattern tells apart share a class
  size_t classes_ = 1;
  std::vector<int32_t> next_;      // [state * classes_ + class] -> state or kDead
  std::vector<uint8_t> accept_;    // [state]
  std::vector<uint32_t> min_chars_;  // [state]
  std::vector<uint32_t> min_chars_via_bmp_;  // [state]
};

}  // namespace pg::runtime
