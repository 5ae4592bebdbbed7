// guided_regex / guided_choice: output that matches a regex in full, then EOS, masked exactly
// by ByteConstraint (runtime/token_mask.h) with RegexMatcher.
#pragma once

#include <memory>
#include <utility>

#include "runtime/regex.h"
#include "runtime/token_mask.h"

namespace pg::runtime {

// Prefixes of a regex's language (token_mask.h's matcher interface). The regex must outlive
// the matcher (the constraint owns it).
class RegexMatcher {
 public:
  explicit RegexMatcher(const Regex& re) : re_(&re), state_(re.start()) {}
  bool Accept(uint8_t c) {
    state_ = re_->Next(state_, c);
    return state_ != Regex::kDead;
  }
  bool can_end() const { return re_->accepting(state_); }
  int string_budget() const { return -1; }
  // Every text token is judged by the automaton alone, from this state, without a length bound.
  RegexView regex_view() const { return {.re = re_, .state = state_}; }

 private:
  const Regex* re_;
  int32_t state_;
};

using RegexConstraint = ByteConstraint<RegexMatcher>;

inline std::unique_ptr<OutputConstraint> MakeRegexConstraint(std::shared_ptr<const TokenTable> table,
                                                            std::shared_ptr<const Regex> re) {
  RegexMatcher m(*re);
  return std::make_unique<RegexConstraint>(std::move(table), m, std::move(re));
}

}  // namespace pg::runtime
