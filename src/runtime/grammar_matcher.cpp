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
    Expand(*g_, -1, g_->root, 0, &start);
    start_ = Intern(std::move(start));
  }
  int32_t start() const { return start_; }
  bool accepting(int32_t s) const { return states_[size_t(s)].front() == 0; }
  size_t num_states() const { return states_.size(); }

  int32_t Next(int32_t s, uint8_t c) {
    int32_t& t = trans_[size_t(s) * 256 + c];
    if (t != kUnknown) return t;
    std::vector<int32_t> out;
    for (int32_t n : states_[size_t(s)]) {
      if (n == 0) continue;
      const auto [pos, parent] = nodes_[size_t(n)];
      if (Grammar::Has(g_->sets[size_t(g_->elems[size_t(pos)].arg)], c)) Closure(pos + 1, parent, &out);
    }
    // Past the state cap (pathological ambiguity, e.g. [ab]* "a" [ab]{15}) new states are not
    // made: the byte counts as impossible, so the output may end early, but memory stays
    // bounded (1 KiB of transitions a state).
    const bool full = states_.size() >= kMaxStates && !state_ids_.count(out);
    if (full && !warned_) {
      warned_ = true;
      PG_LOG_WARN("grammar: the automaton reached {} states in one request; continuations that "
                  "need more are refused",
                  kMaxStates);
    }
    const int32_t next = out.empty() || full ? kDead : Intern(std::move(out));
    trans_[size_t(s) * 256 + c] = next;  // (Intern may have grown trans_: index again)
    return next;
  }

 private:
  int32_t Node(int32_t pos, int32_t parent) {
    const uint64_t key = (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent);
    auto [it, fresh] = node_ids_.try_emplace(key, int32_t(nodes_.size()));
    if (fresh) nodes_.push_back({pos, parent});
    return it->second;
  }
  // The stacks reached from `pos` with `parent` below it, every rule at their tops expanded.
  void Closure(int32_t pos, int32_t parent, std::vector<int32_t>* out) {
    seen_.clear();
    Walk(pos, parent, out);
    std::sort(out->begin(), out->end());
    out->erase(std::unique(out->begin(), out->end()), out->end());
  }
  void Walk(int32_t pos, int32_t parent, std::vector<int32_t>* out) {
    const uint64_t key = (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent);
    if (!seen_.insert(key).second) return;
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
        Expand(*g_, pos, e.arg, parent, out);
        return;
    }
  }
  // Rule `rule` referenced at `pos` (-1: the root) over `parent`.
  void Expand(const Grammar& g, int32_t pos, int32_t rule, int32_t parent, std::vector<int32_t>* out) {
    const bool last = pos < 0 || g.elems[size_t(pos) + 1].op == Grammar::Op::kEnd;
    const int32_t cont = last ? parent : Node(pos + 1, parent);
    for (int32_t a : g.rules[size_t(rule)]) Walk(a, cont, out);
    if (pos < 0) {
      std::sort(out->begin(), out->end());
      out->erase(std::unique(out->begin(), out->end()), out->end());
    }
  }
  int32_t Intern(std::vector<int32_t> set) {
    auto [it, fresh] = state_ids_.try_emplace(set, int32_t(states_.size()));
    if (fresh) {
      states_.push_back(std::move(set));
      trans_.resize(states_.size() * 256, kUnknown);
    }
    return it->second;
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
