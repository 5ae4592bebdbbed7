// GBNF text -> Grammar's byte-level program (grammar.h). Recursive descent over the text;
// every construct becomes alternatives of element runs, built per rule and flattened at the
// end; rule references are resolved by name once every rule is known.
#include <algorithm>
#include <cctype>
#include <map>

#include "core/status.h"
#include "core/utf8.h"
#include "runtime/grammar.h"
#include "runtime/regex_ast.h"

namespace pg::runtime {
namespace {

using Seq = std::vector<Grammar::Elem>;
using Alts = std::vector<Seq>;

class Parser {
 public:
  explicit Parser(std::string_view text) : t_(text) {}

  std::shared_ptr<const Grammar> Run() {
    Space();
    if (i_ >= t_.size()) Fail("the grammar is empty (it needs a root rule)");
    while (i_ < t_.size()) {
      const size_t at = i_;
      const std::string name = Name();
      if (name.empty()) Fail("expected a rule name");
      Space();
      if (t_.substr(i_, 3) != "::=") Fail("expected '::=' after the rule name '" + name + "'");
      i_ += 3;
      const int32_t r = RuleId(name);
      if (defined_[size_t(r)]) FailAt(at, "rule '" + name + "' is defined twice");
      defined_[size_t(r)] = 1;
      current_ = r;
      alts_[size_t(r)] = Alternates(/*nested=*/false);
    }
    for (size_t k = 0; k < refs_.size(); ++k)
      if (!defined_[size_t(refs_[k].rule)]) FailAt(refs_[k].at, "undefined rule '" + g_->rule_names[size_t(refs_[k].rule)] + "'");
    auto it = ids_.find("root");
    if (it == ids_.end()) Fail("no 'root' rule (the grammar's start)");
    g_->root = it->second;
    Flatten();
    CheckProductive();
    CheckLeftRecursion();
    return g_;
  }

 private:
  struct Ref {
    int32_t rule;
    size_t at;
  };

  [[noreturn]] void FailAt(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < t_.size(); ++k) {
      if (t_[k] == '\n') ++line, col = 1;
      else ++col;
    }
    Throw(ErrorCode::kInvalidArgument, "grammar line {} column {}: {}", line, col, what);
  }
  [[noreturn]] void Fail(const std::string& what) const { FailAt(i_, what); }

  static bool NameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }
  std::string Name() {
    const size_t b = i_;
    while (i_ < t_.size() && NameChar(t_[i_])) ++i_;
    return std::string(t_.substr(b, i_ - b));
  }
  void Space() {
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') ++i_;
      else if (c == '#') while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      else break;
    }
  }
  // At a rule name followed by '::=': the current rule's body ended.
  bool AtRuleStart() {
    const size_t save = i_;
    const bool named = !Name().empty();
    Space();
    const bool yes = named && t_.substr(i_, 3) == "::=";
    i_ = save;
    return yes;
  }

  int32_t RuleId(const std::string& name) {
    auto [it, fresh] = ids_.try_emplace(name, int32_t(g_->rule_names.size()));
    if (fresh) NewRule(name);
    return it->second;
  }
  int32_t NewRule(std::string name) {
    g_->rule_names.push_back(std::move(name));
    alts_.emplace_back();
    defined_.push_back(0);
    return int32_t(alts_.size()) - 1;
  }
  int32_t Generated(Alts alts) {  // an anonymous rule (a group, a class, a repetition)
    const int32_t r = NewRule(g_->rule_names[size_t(current_)] + "#" + std::to_string(alts_.size()));
    alts_[size_t(r)] = std::move(alts);
    defined_[size_t(r)] = 1;
    return r;
  }
  static Grammar::Elem RuleRef(int32_t r) { return {Grammar::Op::kRule, r}; }
  int32_t Set(const Grammar::ByteSet& s) {
    auto [it, fresh] = set_ids_.try_emplace(s, int32_t(g_->sets.size()));
    if (fresh) g_->sets.push_back(s);
    return it->second;
  }
  static void AddBytes(Grammar::ByteSet* s, uint8_t lo, uint8_t hi) {
    for (int c = lo; c <= hi; ++c) (*s)[size_t(c >> 6)] |= uint64_t(1) << (c & 63);
  }
  Grammar::Elem Byte(uint8_t lo, uint8_t hi) {
    Grammar::ByteSet s{};
    AddBytes(&s, lo, hi);
    return {Grammar::Op::kBytes, Set(s)};
  }

  Alts Alternates(bool nested) {
    Alts alts;
    for (;;) {
      alts.push_back(Sequence(nested));
      Space();
      if (i_ < t_.size() && t_[i_] == '|') {
        ++i_;
        continue;
      }
      break;
    }
    if (nested) {
      if (i_ >= t_.size() || t_[i_] != ')') Fail("expected ')'");
      ++i_;
    }
    return alts;
  }

  Seq Sequence(bool nested) {
    Seq seq;
    for (;;) {
      Space();
      if (i_ >= t_.size() || t_[i_] == '|' || t_[i_] == ')') break;
      if (!nested && AtRuleStart()) break;
      Seq item = Item();
      Postfix(std::move(item), &seq);
    }
    return seq;
  }

  Seq Item() {
    const char c = t_[i_];
    if (c == '"' || c == '\'') return Literal();
    if (c == '[') return {RuleRef(Generated(ClassAlts(Class())))};
    if (c == '.') {
      ++i_;
      return {RuleRef(Generated(ClassAlts({{0, 0xD7FF}, {0xE000, 0x10FFFF}})))};
    }
    if (c == '(') {
      ++i_;
      const int32_t r = Generated({});
      alts_[size_t(r)] = Alternates(/*nested=*/true);
      return {RuleRef(r)};
    }
    if (NameChar(c)) {
      const size_t at = i_;
      const std::string name = Name();
      const int32_t r = RuleId(name);
      refs_.push_back({r, at});
      return {RuleRef(r)};
    }
    Fail(std::string("unexpected '") + c + "'");
  }

  // A repetition wraps the item in a rule of its own unless it is one element already.
  void Postfix(Seq item, Seq* out) {
    if (i_ >= t_.size() || (t_[i_] != '*' && t_[i_] != '+' && t_[i_] != '?' && t_[i_] != '{')) {
      out->insert(out->end(), item.begin(), item.end());
      return;
    }
    int lo = 0, hi = -1;  // hi -1: unbounded
    const char c = t_[i_++];
    if (c == '+') lo = 1;
    else if (c == '?') hi = 1;
    else if (c == '{') Bounds(&lo, &hi);
    const Grammar::Elem x = item.size() == 1 ? item[0] : RuleRef(Generated({item}));
    for (int k = 0; k < lo; ++k) out->push_back(x);
    if (hi < 0) {  // star ::= x star | ""
      const int32_t star = Generated({});
      alts_[size_t(star)] = {{x, RuleRef(star)}, {}};
      out->push_back(RuleRef(star));
    } else if (hi > lo) {  // opt_k ::= x opt_{k-1} | "", opt_1 ::= x | ""
      int32_t opt = Generated({{x}, {}});
      for (int k = 1; k < hi - lo; ++k) opt = Generated({{x, RuleRef(opt)}, {}});
      out->push_back(RuleRef(opt));
    }
  }
  int Number() {
    const size_t b = i_;
    long v = 0;
    while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9' && v <= Grammar::kMaxRepeat) v = v * 10 + (t_[i_++] - '0');
    if (i_ == b) return -1;
    if (v > Grammar::kMaxRepeat) FailAt(b, "repetition bound above " + std::to_string(Grammar::kMaxRepeat));
    return int(v);
  }
  void Bounds(int* lo, int* hi) {
    Space();
    const int m = Number();
    Space();
    if (i_ < t_.size() && t_[i_] == '}') {
      if (m < 0) Fail("expected a number in '{...}'");
      ++i_;
      *lo = *hi = m;
      return;
    }
    if (i_ >= t_.size() || t_[i_] != ',') Fail("expected ',' or '}' in a repetition");
    ++i_;
    Space();
    const int n = Number();
    Space();
    if (i_ >= t_.size() || t_[i_] != '}') Fail("expected '}'");
    ++i_;
    *lo = std::max(m, 0);
    *hi = n;
    if (n >= 0 && n < *lo) Fail("repetition {m,n} with n < m");
  }

  // One code point of a literal or a class, escapes decoded.
  uint32_t Char() {
    if (i_ >= t_.size()) Fail("unterminated literal or class");
    if (t_[i_] != '\\') {
      uint32_t cp = 0;
      const size_t b = i_;
      if (!NextCodepoint(t_, &i_, &cp)) FailAt(b, "invalid UTF-8");
      return cp;
    }
    ++i_;
    if (i_ >= t_.size()) Fail("a '\\' at the end");
    const char e = t_[i_++];
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': return uint32_t(e);
      case 'x': return Hex(2);
      case 'u': return Hex(4);
      case 'U': return Hex(8);
      default: FailAt(i_ - 2, std::string("unknown escape '\\") + e + "'");
    }
  }
  uint32_t Hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (i_ >= t_.size() || !std::isxdigit(uint8_t(t_[i_]))) Fail("expected a hex digit");
      const char h = t_[i_++];
      v = v * 16 + uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) FailAt(i_ - size_t(digits) - 2, "escape is not a Unicode scalar value");
    return v;
  }

  Seq Literal() {
    const char quote = t_[i_++];
    Seq seq;
    while (i_ < t_.size() && t_[i_] != quote) {
      std::string bytes;
      AppendUtf8(&bytes, Char());
      for (char b : bytes) seq.push_back(Byte(uint8_t(b), uint8_t(b)));
    }
    if (i_ >= t_.size()) Fail("unterminated literal");
    ++i_;
    return seq;
  }

  RegexAst::Ranges Class() {
    ++i_;  // '['
    const bool negate = i_ < t_.size() && t_[i_] == '^';
    if (negate) ++i_;
    RegexAst::Ranges r;
    while (i_ < t_.size() && t_[i_] != ']') {
      const uint32_t lo = Char();
      uint32_t hi = lo;
      if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
        ++i_;
        hi = Char();
        if (hi < lo) Fail("class range out of order");
      }
      r.emplace_back(lo, hi);
    }
    if (i_ >= t_.size()) Fail("unterminated character class");
    ++i_;
    r = NormalizeRanges(std::move(r));  // (drops surrogates)
    return negate ? ComplementRanges(r) : r;
  }
  // A class as alternatives of byte runs: the one-byte code points in one set, each longer
  // UTF-8 run its own alternative.
  Alts ClassAlts(const RegexAst::Ranges& ranges) {
    Alts alts;
    Grammar::ByteSet ascii{};
    bool any_ascii = false;
    for (const Utf8Seq& s : Utf8Sequences(ranges)) {
      if (s.size() == 1) {
        AddBytes(&ascii, s[0].first, s[0].second);
        any_ascii = true;
        continue;
      }
      Seq seq;
      for (auto [lo, hi] : s) seq.push_back(Byte(lo, hi));
      alts.push_back(std::move(seq));
    }
    if (any_ascii) alts.insert(alts.begin(), Seq{{Grammar::Op::kBytes, Set(ascii)}});
    if (alts.empty()) Fail("the class matches no character");
    return alts;
  }

  void Flatten() {
    g_->rules.assign(alts_.size(), {});
    for (size_t r = 0; r < alts_.size(); ++r) {
      for (const Seq& s : alts_[r]) {
        g_->rules[r].push_back(int32_t(g_->elems.size()));
        g_->elems.insert(g_->elems.end(), s.begin(), s.end());
        g_->elems.push_back({Grammar::Op::kEnd, 0});
        if (g_->elems.size() > Grammar::kMaxElements)
          Throw(ErrorCode::kInvalidArgument, "grammar too large after expanding repetitions (over {} elements)",
                Grammar::kMaxElements);
      }
    }
  }

  // The least fixpoint of "some alternative of the rule has only elements for which
  // elem_ok(element, flags so far) holds": with kRule elements judged by their rule's flag this
  // is "can finish" or "can match nothing", by the predicate.
  template <class ElemOk>
  std::vector<uint8_t> RulesWhere(ElemOk elem_ok) const {
    const Grammar& g = *g_;
    std::vector<uint8_t> flag(g.rules.size(), 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < g.rules.size(); ++r) {
        if (flag[r]) continue;
        for (int32_t p : g.rules[r]) {
          bool all = true;
          for (; g.elems[size_t(p)].op != Grammar::Op::kEnd && all; ++p) all = elem_ok(g.elems[size_t(p)], flag);
          if (all) {
            flag[r] = 1, changed = true;
            break;
          }
        }
      }
    }
    return flag;
  }

  // Every rule must be able to finish (else the matcher could enter a stack that never
  // completes and the output would dead-end): productive = some alternative of bytes and
  // productive rules only.
  void CheckProductive() {
    const Grammar& g = *g_;
    const size_t n = g.rules.size();
    const std::vector<uint8_t> ok = RulesWhere([](Grammar::Elem e, const std::vector<uint8_t>& ok) {
      return e.op == Grammar::Op::kBytes || ok[size_t(e.arg)];
    });
    for (size_t r = 0; r < n; ++r)
      if (!ok[r]) {
        std::string name = g.rule_names[r];
        Throw(ErrorCode::kInvalidArgument, "grammar: rule '{}' can never finish (every alternative recurses)",
              name.substr(0, name.find('#')));
      }
  }

  // Left recursion would make the matcher's expansion endless: a rule that reaches itself
  // through the first elements of its alternatives (past nullable rules) with a frame pushed
  // on the way. Cycles of references in tail position only (a repetition of something
  // nullable) are fine: they come back to the same stack, which the expansion sees once.
  void CheckLeftRecursion() {
    const Grammar& g = *g_;
    const size_t n = g.rules.size();
    const std::vector<uint8_t> nullable = RulesWhere([](Grammar::Elem e, const std::vector<uint8_t>& ok) {
      return e.op == Grammar::Op::kRule && ok[size_t(e.arg)];
    });
    struct Edge {
      int32_t to;
      bool pushes;  // the reference is not last in its alternative
    };
    std::vector<std::vector<Edge>> first(n);
    for (size_t r = 0; r < n; ++r)
      for (int32_t p : g.rules[r])
        for (; g.elems[size_t(p)].op == Grammar::Op::kRule; ++p) {
          const int32_t q = g.elems[size_t(p)].arg;
          first[r].push_back({q, g.elems[size_t(p) + 1].op != Grammar::Op::kEnd});
          if (!nullable[size_t(q)]) break;
        }
    std::vector<int32_t> mark(n, -1);
    auto reaches = [&](int32_t from, int32_t target, int32_t stamp) {
      std::vector<int32_t> todo = {from};
      mark[size_t(from)] = stamp;
      while (!todo.empty()) {
        const int32_t r = todo.back();
        todo.pop_back();
        if (r == target) return true;
        for (const Edge& e : first[size_t(r)])
          if (mark[size_t(e.to)] != stamp) mark[size_t(e.to)] = stamp, todo.push_back(e.to);
      }
      return false;
    };
    int32_t stamp = 0;
    for (size_t r = 0; r < n; ++r)
      for (const Edge& e : first[r])
        if (e.pushes && reaches(e.to, int32_t(r), stamp++)) {
          std::string name = g.rule_names[r];
          Throw(ErrorCode::kInvalidArgument,
                "grammar: rule '{}' is left-recursive (it can reach itself before matching a "
                "character); rewrite it with repetition, e.g. list ::= item (\",\" item)*",
                name.substr(0, name.find('#')));
        }
  }

  std::string_view t_;
  size_t i_ = 0;
  std::shared_ptr<Grammar> g_ = std::make_shared<Grammar>();
  std::map<std::string, int32_t> ids_;
  std::map<Grammar::ByteSet, int32_t> set_ids_;
  std::vector<Alts> alts_;
  std::vector<uint8_t> defined_;
  std::vector<Ref> refs_;
  int32_t current_ = 0;
};

}  // namespace

std::shared_ptr<const Grammar> Grammar::Compile(std::string_view text) { return Parser(text).Run(); }

}  // namespace pg::runtime
