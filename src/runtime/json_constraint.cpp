#include "runtime/json_constraint.h"

#include <algorithm>
#include <array>
#include <limits>
#include <string_view>
#include <utility>

#include "core/status.h"

namespace pg::runtime {
namespace {

constexpr std::string_view kLiterals[] = {"true", "false", "null"};

bool IsWs(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }
bool IsHex(uint8_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

TokenTable TokenTable::Make(std::vector<std::string> bytes, std::vector<uint8_t> special,
                            std::vector<int32_t> eos_ids) {
  PG_CHECK(special.size() == bytes.size(), "{} special flags for {} tokens", special.size(), bytes.size());
  TokenTable t{.bytes = std::move(bytes), .special = std::move(special), .plain = {},
               .eos_ids = std::move(eos_ids)};
  t.plain.resize(t.bytes.size());
  std::vector<uint8_t> eos(t.bytes.size());  // EOS ids are masked by their own rule, never plain
  for (int32_t e : t.eos_ids)
    if (e >= 0 && size_t(e) < eos.size()) eos[size_t(e)] = 1;
  std::vector<int32_t> ids;  // the text ids (not special, not EOS, non-empty): the trie's
  for (size_t i = 0; i < t.bytes.size(); ++i) {
    const std::string& b = t.bytes[i];
    const bool text = !t.special[i] && !eos[i] && !b.empty();
    if (text) ids.push_back(int32_t(i));
    t.plain[i] = text && std::none_of(b.begin(), b.end(), [](char ch) {
      const auto c = uint8_t(ch);
      return c == '"' || c == '\\' || c < 0x20;
    });
    if (!t.plain[i]) t.not_plain.push_back(int32_t(i));
  }
  // The trie, from the text ids sorted by their bytes: equal spellings are adjacent, a prefix
  // comes before its extensions, and children are appended in increasing byte order.
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return t.bytes[size_t(a)] < t.bytes[size_t(b)] || (t.bytes[size_t(a)] == t.bytes[size_t(b)] && a < b);
  });
  TokenTable::Trie& tr = t.trie;
  std::vector<int32_t> last_child;
  auto add_node = [&](uint8_t c) {
    tr.first_child.push_back(-1), tr.next_sibling.push_back(-1), tr.byte.push_back(c);
    tr.end_begin.push_back(0), tr.end_count.push_back(0), last_child.push_back(-1);
    return int32_t(tr.byte.size() - 1);
  };
  add_node(0);                      // the root
  std::vector<int32_t> path = {0};  // path[k]: the node of the current spelling's first k bytes
  std::string_view prev;
  for (int32_t id : ids) {
    const std::string_view b = t.bytes[size_t(id)];
    size_t common = 0;
    while (common < prev.size() && common < b.size() && prev[common] == b[common]) ++common;
    path.resize(common + 1);
    for (size_t k = common; k < b.size(); ++k) {
      const int32_t parent = path.back(), n = add_node(uint8_t(b[k]));
      if (last_child[size_t(parent)] < 0) tr.first_child[size_t(parent)] = n;
      else tr.next_sibling[size_t(last_child[size_t(parent)])] = n;
      last_child[size_t(parent)] = n;
      path.push_back(n);
    }
    const int32_t node = path.back();
    if (tr.end_count[size_t(node)] == 0) tr.end_begin[size_t(node)] = int32_t(tr.ends.size());
    tr.ends.push_back(id);
    ++tr.end_count[size_t(node)];
    prev = b;
  }
  return t;
}

JsonMatcher::Num JsonMatcher::NumberNext(Num s, uint8_t c) {
  const bool digit = IsDigit(c), e = c == 'e' || c == 'E';
  switch (s) {
    case Num::kMinus: return c == '0' ? Num::kZero : digit ? Num::kInt : Num::kEnd;
    case Num::kZero: return c == '.' ? Num::kDot : e ? Num::kE : Num::kEnd;
    case Num::kInt: return digit ? Num::kInt : c == '.' ? Num::kDot : e ? Num::kE : Num::kEnd;
    case Num::kDot: return digit ? Num::kFrac : Num::kEnd;
    case Num::kFrac: return digit ? Num::kFrac : e ? Num::kE : Num::kEnd;
    case Num::kE: return digit ? Num::kExp : c == '+' || c == '-' ? Num::kESign : Num::kEnd;
    case Num::kESign: return digit ? Num::kExp : Num::kEnd;
    case Num::kExp: return digit ? Num::kExp : Num::kEnd;
    case Num::kEnd: break;
  }
  return Num::kEnd;
}

bool JsonMatcher::Whitespace() { return ++ws_ <= kMaxWhitespace; }

bool JsonMatcher::NumberEnds() const {
  return num_ == Num::kZero || num_ == Num::kInt || num_ == Num::kFrac || num_ == Num::kExp;
}

bool JsonMatcher::CloseValue() {
  ws_ = 0;
  mode_ = depth_ == 0 ? Mode::kDone : Mode::kAfterValue;
  return true;
}

bool JsonMatcher::ValueStart(uint8_t c) {
  ws_ = 0;
  switch (c) {
    case '{':
    case '[':
      if (depth_ >= kMaxDepth) return false;
      stack_[size_t(depth_++)] = c;
      mode_ = c == '{' ? Mode::kFirstKeyOrEnd : Mode::kFirstValueOrEnd;
      return true;
    case '"': mode_ = Mode::kString, key_ = false; return true;
    case '-': mode_ = Mode::kNumber, num_ = Num::kMinus; return true;
    case '0': mode_ = Mode::kNumber, num_ = Num::kZero; return true;
    case 't': mode_ = Mode::kLiteral, lit_ = 0, lit_pos_ = 1; return true;
    case 'f': mode_ = Mode::kLiteral, lit_ = 1, lit_pos_ = 1; return true;
    case 'n': mode_ = Mode::kLiteral, lit_ = 2, lit_pos_ = 1; return true;
    default:
      if (c >= '1' && c <= '9') {
        mode_ = Mode::kNumber, num_ = Num::kInt;
        return true;
      }
      return false;
  }
}

bool JsonMatcher::Accept(uint8_t c) {
  const uint8_t top = depth_ > 0 ? stack_[size_t(depth_ - 1)] : 0;
  switch (mode_) {
    case Mode::kStart:
      if (IsWs(c)) return Whitespace();
      if (c != '{') return false;  // json_object: the top level is an object
      return ValueStart(c);
    case Mode::kValue:
      return IsWs(c) ? Whitespace() : ValueStart(c);
    case Mode::kFirstKeyOrEnd:
    case Mode::kKey:
      if (IsWs(c)) return Whitespace();
      if (c == '"') {
        mode_ = Mode::kString, key_ = true, ws_ = 0;
        return true;
      }
      if (c == '}' && mode_ == Mode::kFirstKeyOrEnd) {
        --depth_;
        return CloseValue();
      }
      return false;
    case Mode::kColon:
      if (IsWs(c)) return Whitespace();
      if (c != ':') return false;
      mode_ = Mode::kValue, ws_ = 0;
      return true;
    case Mode::kFirstValueOrEnd:
      if (IsWs(c)) return Whitespace();
      if (c == ']') {
        --depth_;
        return CloseValue();
      }
      return ValueStart(c);
    case Mode::kAfterValue:
      if (IsWs(c)) return Whitespace();
      if (c == ',') {
        mode_ = top == '{' ? Mode::kKey : Mode::kValue, ws_ = 0;
        return true;
      }
      if ((c == '}' && top == '{') || (c == ']' && top == '[')) {
        --depth_;
        return CloseValue();
      }
      return false;
    case Mode::kString:
      if (c == '"') {
        if (!key_) return CloseValue();
        mode_ = Mode::kColon, ws_ = 0;
        return true;
      }
      if (c == '\\') {
        mode_ = Mode::kEscape;
        return true;
      }
      return c >= 0x20;  // bytes >= 0x80 (UTF-8) pass as they are
    case Mode::kEscape:
      if (c == 'u') {
        mode_ = Mode::kUnicode, hex_left_ = 4;
        return true;
      }
      if (std::string_view("\"\\/bfnrt").find(char(c)) == std::string_view::npos) return false;
      mode_ = Mode::kString;
      return true;
    case Mode::kUnicode:
      if (!IsHex(c)) return false;
      if (--hex_left_ == 0) mode_ = Mode::kString;
      return true;
    case Mode::kNumber:
      if (const Num next = NumberNext(num_, c); next != Num::kEnd) {
        num_ = next;
        return true;
      }
      // Any other byte ends the number (where it may end) and is read after it.
      if (!NumberEnds()) return false;
      CloseValue();
      return Accept(c);
    case Mode::kLiteral: {
      const std::string_view lit = kLiterals[lit_];
      if (c != uint8_t(lit[lit_pos_])) return false;
      if (++lit_pos_ == lit.size()) return CloseValue();
      return true;
    }
    case Mode::kDone:
      return false;
  }
  return false;
}

bool JsonMatcher::Accept(std::string_view bytes) {
  for (char ch : bytes)
    if (!Accept(uint8_t(ch))) return false;
  return true;
}

JsonConstraint::JsonConstraint(std::shared_ptr<const TokenTable> table) : table_(std::move(table)) {
  PG_CHECK(table_ != nullptr, "JSON constraint without a token table");
}

bool JsonConstraint::IsEos(int32_t token) const {
  return std::find(table_->eos_ids.begin(), table_->eos_ids.end(), token) != table_->eos_ids.end();
}

bool JsonConstraint::Allowed(int32_t token) const {
  if (token < 0 || size_t(token) >= table_->bytes.size()) return false;
  if (IsEos(token)) return matcher_.done();
  if (matcher_.done() || table_->special[size_t(token)]) return false;
  if (matcher_.in_plain_string() && table_->plain[size_t(token)]) return true;  // state unchanged
  const std::string& b = table_->bytes[size_t(token)];
  if (b.empty()) return false;
  JsonMatcher m = matcher_;
  return m.Accept(b);
}

void JsonConstraint::Mask(std::span<float> logits) const {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const TokenTable& t = *table_;
  const size_t n = std::min(logits.size(), t.bytes.size());
  for (size_t i = n; i < logits.size(); ++i) logits[i] = kNegInf;  // ids beyond the table
  bool any = false;
  if (matcher_.in_plain_string()) {
    // Inside a string every plain token is allowed and leaves the state as is: only the others
    // (quotes, escapes, control bytes, special tokens) are tried.
    for (int32_t id : t.not_plain) {
      if (size_t(id) >= n) continue;
      if (Allowed(id)) any = true;
      else logits[size_t(id)] = kNegInf;
    }
    any = any || t.not_plain.size() < t.bytes.size();
  } else {
    // Elsewhere few tokens fit: walk the trie, one matcher step per node, pruning a subtree at
    // the first byte that cannot follow; keep the logits of the ids found and mask the rest.
    std::vector<std::pair<int32_t, float>> keep;
    const TokenTable::Trie& tr = t.trie;
    auto walk = [&](auto& self, int32_t node, const JsonMatcher& m) -> void {
      for (int32_t c = tr.first_child[size_t(node)]; c >= 0; c = tr.next_sibling[size_t(c)]) {
        JsonMatcher next = m;
        if (!next.Accept(tr.byte[size_t(c)])) continue;
        for (int32_t k = 0; k < tr.end_count[size_t(c)]; ++k) {
          const int32_t id = tr.ends[size_t(tr.end_begin[size_t(c)] + k)];
          if (size_t(id) < n) keep.emplace_back(id, logits[size_t(id)]);
        }
        self(self, c, next);
      }
    };
    walk(walk, 0, matcher_);
    for (int32_t e : t.eos_ids)
      if (e >= 0 && size_t(e) < n && Allowed(e)) keep.emplace_back(e, logits[size_t(e)]);
    std::fill(logits.begin(), logits.begin() + std::ptrdiff_t(n), kNegInf);
    for (const auto& [id, v] : keep) logits[size_t(id)] = v;
    any = !keep.empty();
  }
  if (any) return;
  // Nothing can continue the object (a vocabulary without the needed bytes): end the output
  // rather than draw from an empty set. The caller sees the truncated text.
  for (int32_t e : table_->eos_ids)
    if (e >= 0 && size_t(e) < logits.size()) logits[size_t(e)] = 0.0f;
}

void JsonConstraint::Accept(int32_t token) {
  if (IsEos(token) || token < 0 || size_t(token) >= table_->bytes.size()) return;
  JsonMatcher m = matcher_;
  if (m.Accept(table_->bytes[size_t(token)])) matcher_ = m;
}

}  // namespace pg::runtime
