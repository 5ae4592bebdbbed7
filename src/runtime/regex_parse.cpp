// ParseRegex: a pattern (UTF-8) to RegexAst, by recursive descent over its code points. Every
// construct outside runtime/regex.h's syntax is refused with its position; none is read as
// something it is not.
#include <algorithm>
#include <cctype>
#include <string>

#include "core/status.h"
#include "core/utf8.h"
#include "runtime/regex_ast.h"

namespace pg::runtime {

using Ranges = RegexAst::Ranges;
using Type = RegexAst::Type;

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

// The pattern's code points; ill-formed UTF-8 (overlong forms and surrogates included) is
// refused.
std::vector<uint32_t> DecodeUtf8(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    PG_ENSURE(NextCodepoint(s, &i, &cp), kInvalidArgument, "regex at byte position {}: the pattern is not valid UTF-8", i);
    out.push_back(cp);
  }
  return out;
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript's WhiteSpace and LineTerminator.
const Ranges kSpace = {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680},
                       {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                       {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
// `.`: any code point but the line terminators.
const Ranges kNotLineEnd = ComplementRanges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}});

class Parser {
 public:
  Parser(std::string_view pattern, Regex::Anchoring anchoring) : cp_(DecodeUtf8(pattern)), anchoring_(anchoring) {}

  RegexAst Run() {
    ast_.root = Alternation(/*top=*/true);
    if (pos_ < cp_.size()) Fail("an unmatched ')'");
    return std::move(ast_);
  }

 private:
  template <typename... Args>
  [[noreturn]] void Fail(fmt::format_string<Args...> f, Args&&... args) const {
    Throw(ErrorCode::kInvalidArgument, "regex at position {}: {}", pos_, fmt::format(f, std::forward<Args>(args)...));
  }
  [[noreturn]] void FailAt(size_t at, const char* what) {
    pos_ = at;
    Fail("{}", what);
  }
  bool More() const { return pos_ < cp_.size(); }
  uint32_t Peek(size_t ahead = 0) const { return pos_ + ahead < cp_.size() ? cp_[pos_ + ahead] : 0xFFFFFFFF; }
  bool Eat(uint32_t c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }

  int32_t Set(Ranges r) {
    r = NormalizeRanges(std::move(r));
    if (r.empty()) Fail("a class that matches no character");
    return ast_.Add({.type = Type::kSet, .ranges = std::move(r)});
  }

  // alternation := sequence ('|' sequence)*. At the top level each sequence may open with
  // `^` and close with `$`; under kSearch a side without its anchor takes any text.
  int32_t Alternation(bool top) {
    RegexAst::Node alt{.type = Type::kAlt};
    do alt.kids.push_back(Sequence(top));
    while (Eat('|'));
    return alt.kids.size() == 1 ? alt.kids[0] : ast_.Add(std::move(alt));
  }

  int32_t Sequence(bool top) {
    RegexAst::Node cat{.type = Type::kCat};
    const bool start_anchor = top && Eat('^');
    bool end_anchor = false;
    while (More() && Peek() != '|' && Peek() != ')') {
      if (Peek() == '^') Fail("'^' is supported only at the start of the pattern or of a top-level alternative");
      if (Peek() == '$') {
        ++pos_;
        if (!top || (More() && Peek() != '|'))
          Fail("'$' is supported only at the end of the pattern or of a top-level alternative");
        end_anchor = true;
        break;
      }
      cat.kids.push_back(Quantified(Atom()));
    }
    if (anchoring_ == Regex::Anchoring::kSearch && top) {
      auto any_text = [&] {
        const int32_t any = Set(ComplementRanges({}));
        return ast_.Add({.type = Type::kRepeat, .kids = {any}, .min = 0, .max = -1});
      };
      if (!start_anchor) cat.kids.insert(cat.kids.begin(), any_text());
      if (!end_anchor) cat.kids.push_back(any_text());
    }
    return cat.kids.size() == 1 ? cat.kids[0] : ast_.Add(std::move(cat));
  }

  // {n}, {n,}, {n,m} at pos_ (just past '{'); false (pos_ unchanged) when the braces do not
  // form a quantifier, which makes '{' a literal, as ECMAScript and Python read it.
  bool Braces(int& min, int& max) {
    const size_t start = pos_;
    auto number = [&](int& v) {
      const size_t from = pos_;
      int64_t x = 0;
      while (Peek() >= '0' && Peek() <= '9') x = std::min<int64_t>(x * 10 + (cp_[pos_++] - '0'), 1 << 30);
      v = int(x);
      return pos_ > from;
    };
    if (!number(min)) return pos_ = start, false;
    max = min;
    if (Eat(',')) {
      max = -1;
      if (Peek() != '}' && !number(max)) return pos_ = start, false;
    }
    if (!Eat('}')) return pos_ = start, false;
    return true;
  }

  int32_t Quantified(int32_t atom) {
    for (;;) {
      int min = 0, max = -1;
      const size_t at = pos_;
      if (Eat('*')) min = 0, max = -1;
      else if (Eat('+')) min = 1, max = -1;
      else if (Eat('?')) min = 0, max = 1;
      else if (Peek() == '{' && (++pos_, Braces(min, max))) {
        if (max >= 0 && min > max) Fail("a quantifier {{{},{}}} with its minimum above its maximum", min, max);
        if (std::max(min, max) > Regex::kMaxRepeat) Fail("a repeat count above {}", Regex::kMaxRepeat);
      } else {
        if (pos_ != at) --pos_;  // a '{' that is a literal: Atom reads it
        return atom;
      }
      if (Eat('+')) Fail("possessive quantifiers are not supported");
      Eat('?');  // lazy: the same language
      atom = ast_.Add({.type = Type::kRepeat, .kids = {atom}, .min = min, .max = max});
    }
  }

  int32_t Atom() {
    const uint32_t c = cp_[pos_++];
    switch (c) {
      case '(': return Group();
      case '[': return Class();
      case '.': return Set(kNotLineEnd);
      case '\\': return Escape(/*in_class=*/false);
      case '*':
      case '+':
      case '?':
        --pos_;
        Fail("'{}' has nothing to repeat", char(c));
      default: return Set({{c, c}});
    }
  }

  int32_t Group() {
    if (Eat('?')) {
      if (Eat(':')) {
      } else if ((Peek() == '<' && Peek(1) != '=' && Peek(1) != '!') || (Peek() == 'P' && Peek(1) == '<')) {
        if (Peek() == 'P') ++pos_;
        ++pos_;
        while (More() && Peek() != '>') ++pos_;  // a named group: the name is not used
        if (!Eat('>')) Fail("an unterminated group name");
      } else if (Peek() == '=' || Peek() == '!' || Peek() == '<') {
        Fail("lookaround assertions are not supported");
      } else {
        Fail("'(?{}' (inline flags, atomic groups, ...) is not supported", More() ? std::string(1, char(Peek())) : "");
      }
    }
    if (++depth_ > 200) Fail("groups nested deeper than 200");
    const int32_t inner = Alternation(/*top=*/false);
    --depth_;
    if (!Eat(')')) Fail("a '(' without its ')'");
    return inner;
  }

  // Reads hex digits: exactly `n`, or (n = 0) one or more up to '}'.
  uint32_t Hex(int n) {
    uint32_t v = 0;
    int got = 0;
    for (; n == 0 ? Peek() != '}' : got < n; ++got) {
      const uint32_t h = Peek();
      const int d = h >= '0' && h <= '9' ? int(h - '0') : h >= 'a' && h <= 'f' ? int(h - 'a' + 10)
                  : h >= 'A' && h <= 'F' ? int(h - 'A' + 10) : -1;
      if (d < 0) Fail("a malformed hexadecimal escape");
      v = v * 16 + uint32_t(d);
      if (v > kMaxCodePoint) Fail("an escape beyond U+10FFFF");
      ++pos_;
    }
    if (got == 0) Fail("a malformed hexadecimal escape");
    return v;
  }

  // After '\\': a class escape's ranges, or one code point. In a class, \b is a backspace.
  Ranges EscapeRanges(bool in_class) {
    if (!More()) Fail("a pattern that ends in '\\'");
    const size_t at = pos_ - 1;  // the backslash: where errors point
    const uint32_t c = cp_[pos_++];
    switch (c) {
      case 'd': return kDigit;
      case 'D': return ComplementRanges(kDigit);
      case 'w': return kWord;
      case 'W': return ComplementRanges(kWord);
      case 's': return kSpace;
      case 'S': return ComplementRanges(kSpace);
      case 't': return {{'\t', '\t'}};
      case 'n': return {{'\n', '\n'}};
      case 'r': return {{'\r', '\r'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case '0': return {{0, 0}};
      case 'x': {
        const uint32_t v = Hex(2);
        return {{v, v}};
      }
      case 'u': {
        uint32_t v = 0;
        if (Eat('{')) {
          v = Hex(0);
          Eat('}');
        } else {
          v = Hex(4);
        }
        if (v >= kSurrogateLo && v <= kSurrogateHi) Fail("a surrogate code point escape");
        return {{v, v}};
      }
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        [[fallthrough]];
      case 'B': FailAt(at, "word boundaries (\\b, \\B) are not supported");
      case 'p':
      case 'P': FailAt(at, "Unicode property classes (\\p, \\P) are not supported");
      case 'k': FailAt(at, "backreferences are not supported");
      default:
        if (c >= '1' && c <= '9') FailAt(at, "backreferences are not supported");
        if (c < 0x80 && !std::isalnum(int(c))) return {{c, c}};  // escaped punctuation
        pos_ = at;
        Fail("the unknown escape '\\{}'", c < 0x80 ? std::string(1, char(c)) : "U+" + fmt::format("{:04X}", c));
    }
  }

  int32_t Escape(bool in_class) { return Set(EscapeRanges(in_class)); }

  // After '[': items up to ']'. A ']' first is a literal; '-' first or last is a literal.
  int32_t Class() {
    const bool negate = Eat('^');
    Ranges r;
    bool first = true;
    for (;;) {
      if (!More()) Fail("a '[' without its ']'");
      if (Peek() == ']' && !first) break;
      first = false;
      Ranges lo = Item();
      if (Peek() == '-' && Peek(1) != ']' && Peek(1) != 0xFFFFFFFF) {
        ++pos_;
        Ranges hi = Item();
        if (lo.size() != 1 || hi.size() != 1 || lo[0].first != lo[0].second || hi[0].first != hi[0].second)
          Fail("a class range with a class escape at an end");
        if (lo[0].first > hi[0].first) Fail("a class range out of order");
        r.emplace_back(lo[0].first, hi[0].first);
      } else {
        r.insert(r.end(), lo.begin(), lo.end());
      }
    }
    ++pos_;  // ']'
    r = NormalizeRanges(std::move(r));
    return Set(negate ? ComplementRanges(r) : r);
  }

  Ranges Item() {
    const uint32_t c = cp_[pos_++];
    if (c == '\\') return EscapeRanges(/*in_class=*/true);
    if (c == '[' && (Peek() == ':' || Peek() == '=' || Peek() == '.')) Fail("POSIX classes ([:alpha:]) are not supported");
    return {{c, c}};
  }

  std::vector<uint32_t> cp_;
  size_t pos_ = 0;
  int depth_ = 0;
  Regex::Anchoring anchoring_;
  RegexAst ast_;
};

}  // namespace

Ranges NormalizeRanges(Ranges r) {
  // Surrogates first: split a range around them.
  Ranges cut;
  for (auto [lo, hi] : r) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    if (hi < kSurrogateLo || lo > kSurrogateHi) {
      cut.emplace_back(lo, hi);
      continue;
    }
    if (lo < kSurrogateLo) cut.emplace_back(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) cut.emplace_back(kSurrogateHi + 1, hi);
  }
  std::sort(cut.begin(), cut.end());
  Ranges out;
  for (const auto& [lo, hi] : cut) {
    if (!out.empty() && lo <= out.back().second + 1) out.back().second = std::max(out.back().second, hi);
    else out.emplace_back(lo, hi);
  }
  return out;
}

Ranges ComplementRanges(const Ranges& r) {
  const Ranges in = NormalizeRanges(r);
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : in) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return NormalizeRanges(std::move(out));
}

RegexAst ParseRegex(std::string_view pattern, Regex::Anchoring anchoring) {
  return Parser(pattern, anchoring).Run();
}

}  // namespace pg::runtime
