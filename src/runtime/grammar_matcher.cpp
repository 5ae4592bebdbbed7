// GrammarMatcher (grammar.h): the grammar's pushdown automaton over bytes, determinized
// lazily.
//
// A stack is an interned node (position, parent): `position` is the element to match next
// (always a kBytes element once expanded), `parent` the stack to resume when its alternative
// ends (node 0, the empty stack, means the root is complete). Interning makes equal stacks
// equal ids. A DFA state is the sorted set of stacks that are live after the bytes so far; its
// transition on byte c advances every stack whose set holds c, expanding the rules at the new
// positions (a rule reference last in its alternative hands its parent on instead of pushing a
// frame, so repetitions do not deepen the stack). States and transitions are built on first
// use and kept for the request: the mask's trie walk mostly replays them.
#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/log.h"
#include "core/status.h"
#include "runtime/grammar.h"

namespace pg::runtime {

class GrammarDfa {
 public:
  static constexpr int32_t kDead = -1, kUnknown = -2;
  static constexpr size_t kMaxStates = 65536;

  explicit GrammarDfa(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
    nodes_.push_back({-1, -1});  // node 0: the empty stack
    std::vector<int32_t> start;
    seen_.clear();
    Expand(-1, g_->root, 0, &start);
    start_ = Intern(std::move(start));
  }
  int32_t start() const { return start_; }
  bool accepting(int32_t s) const { return states_[size_t(s)].front() == 0; }
  size_t num_states() const { return states_.size(); }

  int32_t Next(int32_t s, uint8_t c) {
    const size_t at = size_t(s) * 256 + c;
    if (trans_[at] != kUnknown) return trans_[at];
    // Every stack whose top byte set holds c moves past it; one walk for the whole state.
    std::vector<int32_t> out;
    seen_.clear();
    for (int32_t n : states_[size_t(s)]) {
      if (n == 0) continue;
      const auto [pos, parent] = nodes_[size_t(n)];
      if (Grammar::Has(g_->sets[size_t(g_->elems[size_t(pos)].arg)], c)) Walk(pos + 1, parent, &out);
    }
    const int32_t next = Intern(std::move(out));
    trans_[at] = next;  // (after Intern, which may grow trans_)
    return next;
  }

 private:
  static uint64_t Key(int32_t pos, int32_t parent) {
    return (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent);
  }
  int32_t Node(int32_t pos, int32_t parent) {
    auto [it, fresh] = node_ids_.try_emplace(Key(pos, parent), int32_t(nodes_.size()));
    if (fresh) nodes_.push_back({pos, parent});
    return it->second;
  }
  // Adds to *out the stacks reached from `pos` with `parent` below it, every rule at their
  // tops expanded; seen_ (cleared by the caller per state built) keeps each (pos, parent) once.
  void Walk(int32_t pos, int32_t parent, std::vector<int32_t>* out) {
    if (!seen_.insert(Key(pos, parent)).second) return;
    const Grammar::Elem e = g_->elems[size_t(pos)];
    switch (e.op) {
      case Grammar::Op::kBytes:
        out->push_back(Node(pos, parent));
        return;
      case Grammar::Op::kEnd:
        if (parent == 0) out->push_back(0);
        else Walk(nodes_[size_t(parent)].first, nodes_[size_t(parent)].second, out);
        return;
      case Grammar::Op::kRule:
        Expand(pos, e.arg, parent, out);
        return;
    }
  }
  // Rule `rule` referenced at `pos` (-1: the root) over `parent`.
  void Expand(int32_t pos, int32_t rule, int32_t parent, std::vector<int32_t>* out) {
    const bool last = pos < 0 || g_->elems[size_t(pos) + 1].op == Grammar::Op::kEnd;
    const int32_t cont = last ? parent : Node(pos + 1, parent);
    for (int32_t a : g_->rules[size_t(rule)]) Walk(a, cont, out);
  }
  // The state of a set of stacks: kDead for none, and past the state cap (pathological
  // ambiguity, e.g. [ab]* "a" [ab]{15}) for a set not seen yet: the byte then counts as
  // impossible, so the output may end early, but memory stays bounded (1 KiB of transitions
  // a state).
  int32_t Intern(std::vector<int32_t> set) {
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    if (set.empty()) return kDead;
    if (auto it = state_ids_.find(set); it != state_ids_.end()) return it->second;
    if (states_.size() >= kMaxStates) {
      if (!warned_) {
        warned_ = true;
        PG_LOG_WARN("grammar: the automaton reached {} states in one request; continuations that "
                    "need more are refused",
                    kMaxStates);
      }
      return kDead;
    }
    state_ids_.emplace(set, int32_t(states_.size()));
    states_.push_back(std::move(set));
    trans_.resize(states_.size() * 256, kUnknown);
    return int32_t(states_.size()) - 1;
  }

  std::shared_ptr<const Grammar> g_;
  std::vector<std::pair<int32_t, int32_t>> nodes_;  // (position, parent)
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<std::vector<int32_t>> states_;        // sorted stack ids; 0 first when complete
  std::map<std::vector<int32_t>, int32_t> state_ids_;
  std::vector<int32_t> trans_;                      // [state * 256 + byte]
  std::unordered_set<uint64_t> seen_;
  int32_t start_ = 0;
  bool warned_ = false;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar)
    : dfa_(std::make_shared<GrammarDfa>(std::move(grammar))), state_(dfa_->start()) {}

bool GrammarMatcher::Accept(uint8_t c) {
  const int32_t next = dfa_->Next(state_, c);
  if (next == GrammarDfa::kDead) return false;
  state_ = next;
  return true;
}

bool GrammarMatcher::can_end() const { return dfa_->accepting(state_); }
size_t GrammarMatcher::num_dfa_states() const { return dfa_->num_states(); }

std::unique_ptr<OutputConstraint> MakeGrammarConstraint(std::shared_ptr<const TokenTable> table,
                                                       std::shared_ptr<const Grammar> grammar) {
  GrammarMatcher m(grammar);
  return std::make_unique<ByteConstraint<GrammarMatcher>>(std::move(table), std::move(m), std::move(grammar));
}

}  // namespace pg::runtime
