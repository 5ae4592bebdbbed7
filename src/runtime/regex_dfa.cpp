// RegexAst -> a Thompson NFA over UTF-8 bytes -> a DFA by subset construction over byte
// classes, with the states that cannot reach an accepting one removed (so a live state can
// always end: the mask never walks into a dead end).
#include <algorithm>
#include <deque>
#include <unordered_map>

#include "core/status.h"
#include "core/utf8.h"
#include "runtime/regex_ast.h"

namespace pg::runtime {

using Ranges = RegexAst::Ranges;
using Type = RegexAst::Type;

namespace {

constexpr size_t kMaxNfaStates = 400000;
constexpr size_t kMaxTableEntries = size_t(16) << 20;  // DFA states x byte classes (64 MB)
// Subset construction's work (NFA states visited) a pattern may cost: compiling runs on the
// request's HTTP thread, so a short pattern must not buy seconds of CPU (~0.3 s here).
constexpr size_t kMaxWork = size_t(100) << 20;

using ByteSeq = Utf8Seq;

int Utf8Length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Byte sequences encoding exactly the code points [lo, hi] of one UTF-8 length: the range is
// split until, at every continuation position, the low bits below it either agree between lo
// and hi or span their whole range; each piece is then a product of per-byte ranges.
void SplitSameLength(uint32_t lo, uint32_t hi, std::vector<ByteSeq>& out) {
  const int n = Utf8Length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      SplitSameLength(lo, lo | m, out);
      SplitSameLength((lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      SplitSameLength(lo, (hi & ~m) - 1, out);
      SplitSameLength(hi & ~m, hi, out);
      return;
    }
  }
  std::string a, b;
  AppendUtf8(&a, lo);
  AppendUtf8(&b, hi);
  ByteSeq seq;
  for (size_t k = 0; k < a.size(); ++k) seq.emplace_back(uint8_t(a[k]), uint8_t(b[k]));
  out.push_back(std::move(seq));
}


}  // namespace

std::vector<ByteSeq> Utf8Sequences(const Ranges& ranges) {
  std::vector<ByteSeq> out;
  constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (auto [lo, hi] : ranges) {
    for (uint32_t end : kLengthEnds) {
      if (lo > hi) break;
      if (lo > end) continue;
      SplitSameLength(lo, std::min(hi, end), out);
      lo = end + 1;
    }
  }
  return out;
}


namespace {

// The fewest code points from `state` to a match through a first code point in one of `seqs`
// (that one included), UINT32_MAX when none leads to a live state.
uint32_t MinCharsVia(const Regex& re, int32_t state, const std::vector<Utf8Seq>& seqs) {
  uint32_t best = UINT32_MAX;
  for (const Utf8Seq& seq : seqs) {
    std::vector<int32_t> cur = {state}, next;
    for (const auto& [blo, bhi] : seq) {
      next.clear();
      for (int32_t s : cur)
        for (int b = blo; b <= bhi; ++b)
          if (const int32_t t = re.Next(s, uint8_t(b)); t != Regex::kDead) next.push_back(t);
      std::sort(next.begin(), next.end());
      next.erase(std::unique(next.begin(), next.end()), next.end());
      cur.swap(next);
      if (cur.empty()) break;
    }
    for (int32_t s : cur) best = std::min(best, re.min_chars(s) + 1);
  }
  return best;
}

}  // namespace

class RegexBuilder {
 public:
  static std::shared_ptr<const Regex> Build(const RegexAst& ast) {
    RegexBuilder b(ast);
    const auto [start, end] = b.Fragment(ast.root);
    b.accept_ = end;
    return b.Determinize(start);
  }

 private:
  explicit RegexBuilder(const RegexAst& ast) : ast_(ast) {}

  // An NFA state: a byte transition [lo, hi] -> out (lo <= hi), or epsilon moves (lo > hi).
  struct NState {
    uint8_t lo = 1, hi = 0;
    int32_t out = -1;
    std::vector<int32_t> eps;
  };

  int32_t New() {
    PG_ENSURE(nfa_.size() < kMaxNfaStates, kInvalidArgument,
              "regex: the pattern is too large (more than {} automaton pieces; lower its repeat counts)", kMaxNfaStates);
    nfa_.emplace_back();
    return int32_t(nfa_.size() - 1);
  }
  void Eps(int32_t from, int32_t to) { nfa_[size_t(from)].eps.push_back(to); }
  // A chain of byte transitions from `from` to `to`.
  void Chain(int32_t from, const ByteSeq& seq, int32_t to) {
    int32_t cur = New();
    Eps(from, cur);
    for (size_t k = 0; k < seq.size(); ++k) {
      const int32_t next = k + 1 == seq.size() ? to : New();
      nfa_[size_t(cur)].lo = seq[k].first, nfa_[size_t(cur)].hi = seq[k].second, nfa_[size_t(cur)].out = next;
      cur = next;
    }
  }

  // A fresh copy of node's automaton: (entry, exit), the exit with no moves yet.
  std::pair<int32_t, int32_t> Fragment(int32_t id) {
    const RegexAst::Node& n = ast_.nodes[size_t(id)];
    const int32_t s = New(), e = New();
    switch (n.type) {
      case Type::kSet:
        for (const ByteSeq& seq : Utf8Sequences(n.ranges)) Chain(s, seq, e);
        break;
      case Type::kBytes:
        if (n.bytes.empty()) Eps(s, e);
        else {
          ByteSeq seq;
          for (char ch : n.bytes) seq.emplace_back(uint8_t(ch), uint8_t(ch));
          Chain(s, seq, e);
        }
        break;
      case Type::kCat: {
        int32_t cur = s;
        for (int32_t k : n.kids) {
          const auto [ks, ke] = Fragment(k);
          Eps(cur, ks);
          cur = ke;
        }
        Eps(cur, e);
        break;
      }
      case Type::kAlt:
        for (int32_t k : n.kids) {
          const auto [ks, ke] = Fragment(k);
          Eps(s, ks);
          Eps(ke, e);
        }
        break;
      case Type::kRepeat: {
        int32_t cur = s;
        for (int i = 0; i < n.min; ++i) {  // the required copies
          const auto [ks, ke] = Fragment(n.kids[0]);
          Eps(cur, ks);
          cur = ke;
        }
        if (n.max < 0) {  // then any number more
          const auto [ks, ke] = Fragment(n.kids[0]);
          Eps(cur, ks);
          Eps(ke, ks);
          Eps(ke, e);
        } else {  // then up to max - min more, each one a place to stop
          for (int i = n.min; i < n.max; ++i) {
            const auto [ks, ke] = Fragment(n.kids[0]);
            Eps(cur, ks);
            Eps(cur, e);
            cur = ke;
          }
        }
        Eps(cur, e);
        break;
      }
    }
    return {s, e};
  }

  // The byte states (and the accepting state) reachable from `from` by epsilon moves, sorted.
  std::vector<int32_t> Closure(const std::vector<int32_t>& from) {
    if (mark_.size() < nfa_.size()) mark_.assign(nfa_.size(), 0);
    ++gen_;
    std::vector<int32_t> stack(from), out;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      ++work_;
      if (mark_[size_t(s)] == gen_) continue;
      mark_[size_t(s)] = gen_;
      const NState& ns = nfa_[size_t(s)];
      if (ns.lo <= ns.hi || s == accept_) out.push_back(s);
      for (int32_t t : ns.eps) stack.push_back(t);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const {
      size_t h = v.size();
      for (int32_t x : v) h = h * 1000003u ^ size_t(x);
      return h;
    }
  };

  std::shared_ptr<const Regex> Determinize(int32_t start) {
    auto re = std::make_shared<Regex>();
    // Byte classes: bytes that every transition treats alike.
    bool cut[257] = {};
    cut[0x80] = cut[0xC0] = true;  // a class is all UTF-8 continuation bytes or none (min_chars_)
    for (const NState& ns : nfa_)
      if (ns.lo <= ns.hi) cut[ns.lo] = cut[size_t(ns.hi) + 1] = true;
    std::vector<uint8_t> rep;  // a byte of each class
    for (int b = 0; b < 256; ++b) {
      if (b == 0 || cut[b]) rep.push_back(uint8_t(b));
      re->byte_class_[b] = uint8_t(rep.size() - 1);
    }
    const size_t classes = rep.size();
    re->classes_ = classes;

    std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids;
    std::vector<std::vector<int32_t>> sets;
    auto intern = [&](std::vector<int32_t> set) -> int32_t {
      if (set.empty()) return Regex::kDead;
      work_ += set.size();  // hashing and comparing it
      auto [it, fresh] = ids.try_emplace(set, int32_t(sets.size()));
      if (fresh) {
        PG_ENSURE(sets.size() < size_t(Regex::kMaxStates) && (sets.size() + 1) * classes <= kMaxTableEntries,
                  kInvalidArgument, "regex: the pattern needs more than {} automaton states (simplify it or lower its repeat counts)",
                  std::min<size_t>(Regex::kMaxStates, kMaxTableEntries / classes));
        sets.push_back(std::move(set));
      }
      return it->second;
    };
    intern(Closure({start}));
    std::vector<std::vector<int32_t>> targets(classes);  // per class: the byte moves' ends
    for (size_t d = 0; d < sets.size(); ++d) {
      re->accept_.push_back(std::binary_search(sets[d].begin(), sets[d].end(), accept_));
      // One pass over the set: a byte state's range covers a run of classes (a class is an
      // interval of bytes, numbered in byte order).
      for (auto& t : targets) t.clear();
      for (int32_t s : sets[d]) {
        const NState& ns = nfa_[size_t(s)];
        if (ns.lo > ns.hi) continue;  // the accepting state
        for (size_t c = re->byte_class_[ns.lo]; c <= re->byte_class_[ns.hi]; ++c) targets[c].push_back(ns.out), ++work_;
      }
      PG_ENSURE(work_ <= kMaxWork, kInvalidArgument,
                "regex: the pattern is too complex to compile ({} steps of subset construction; simplify it or "
                "lower its repeat counts)", kMaxWork);
      for (size_t c = 0; c < classes; ++c)
        re->next_.push_back(targets[c].empty() ? Regex::kDead : intern(Closure(targets[c])));
    }
    // Keep only states that can still reach an accepting one.
    const size_t n = sets.size();
    std::vector<std::vector<int32_t>> preds(n);
    for (size_t d = 0; d < n; ++d)
      for (size_t c = 0; c < classes; ++c)
        if (const int32_t to = re->next_[d * classes + c]; to >= 0) preds[size_t(to)].push_back(int32_t(d));
    std::vector<uint8_t> live(n, 0);
    std::vector<int32_t> work;
    for (size_t d = 0; d < n; ++d)
      if (re->accept_[d]) live[d] = 1, work.push_back(int32_t(d));
    while (!work.empty()) {
      const int32_t d = work.back();
      work.pop_back();
      for (int32_t p : preds[size_t(d)])
        if (!live[size_t(p)]) live[size_t(p)] = 1, work.push_back(p);
    }
    PG_ENSURE(live[0], kInvalidArgument, "regex: the pattern matches nothing");
    // min_chars_: shortest paths back from the accepting states, a lead byte weighing 1 and a
    // continuation byte 0 (0-1 breadth-first search over the reversed edges).
    std::vector<std::vector<std::pair<int32_t, uint8_t>>> back(n);  // (predecessor, weight)
    for (size_t d = 0; d < n; ++d)
      for (size_t c = 0; c < classes; ++c)
        if (const int32_t to = re->next_[d * classes + c]; to >= 0 && live[size_t(to)])
          back[size_t(to)].emplace_back(int32_t(d), uint8_t((rep[c] & 0xC0) != 0x80));
    re->min_chars_.assign(n, UINT32_MAX);
    std::deque<int32_t> q;
    for (size_t d = 0; d < n; ++d)
      if (re->accept_[d]) re->min_chars_[d] = 0, q.push_back(int32_t(d));
    while (!q.empty()) {
      const int32_t d = q.front();
      q.pop_front();
      for (const auto& [p, w] : back[size_t(d)]) {
        const uint32_t via = re->min_chars_[size_t(d)] + w;
        if (via >= re->min_chars_[size_t(p)]) continue;
        re->min_chars_[size_t(p)] = via;
        if (w == 0) q.push_front(p);
        else q.push_back(p);
      }
    }
    for (int32_t& to : re->next_)
      if (to >= 0 && !live[size_t(to)]) to = Regex::kDead;
    const std::vector<Utf8Seq> bmp = Utf8Sequences(NormalizeRanges({{0, 0xFFFF}}));
    re->min_chars_via_bmp_.resize(n);
    for (size_t d = 0; d < n; ++d) re->min_chars_via_bmp_[d] = live[d] ? MinCharsVia(*re, int32_t(d), bmp) : UINT32_MAX;
    return re;
  }

  const RegexAst& ast_;
  std::vector<NState> nfa_;
  int32_t accept_ = -1;
  std::vector<uint32_t> mark_;
  uint32_t gen_ = 0;
  size_t work_ = 0;  // NFA states visited while determinizing (bounded by kMaxWork)
};

std::shared_ptr<const Regex> Regex::Compile(std::string_view pattern, Anchoring anchoring) {
  return RegexBuilder::Build(ParseRegex(pattern, anchoring));
}

std::shared_ptr<const Regex> Regex::Choice(const std::vector<std::string>& choices) {
  PG_ENSURE(!choices.empty(), kInvalidArgument, "a choice needs at least one string");
  RegexAst ast;
  RegexAst::Node alt{.type = Type::kAlt};
  for (const std::string& c : choices) alt.kids.push_back(ast.Add({.type = Type::kBytes, .bytes = c}));
  ast.root = ast.Add(std::move(alt));
  return RegexBuilder::Build(ast);
}


bool Regex::AnyCodePointFits(int32_t state, uint32_t lo, uint32_t hi, uint32_t chars_left) const {
  // via counts the first code point; chars_left does not.
  const uint32_t via = lo == 0 && hi == 0xFFFF ? min_chars_via_bmp(state)
                                               : MinCharsVia(*this, state, Utf8Sequences(NormalizeRanges({{lo, hi}})));
  return via != UINT32_MAX && via - 1 <= chars_left;
}

bool Regex::FullMatch(std::string_view text) const {
  int32_t s = start();
  for (char ch : text)
    if ((s = Next(s, uint8_t(ch))) == kDead) return false;
  return accepting(s);
}

}  // namespace pg::runtime
