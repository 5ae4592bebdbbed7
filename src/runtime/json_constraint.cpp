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

bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }

}  // namespace

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

bool JsonMatcher::NumberEnds(Num s) {
  return s == Num::kZero || s == Num::kInt || s == Num::kFrac || s == Num::kExp;
}

JsonMatcher::Num JsonMatcher::NumberStart(uint8_t c) {
  return c == '-' ? Num::kMinus : c == '0' ? Num::kZero : (c >= '1' && c <= '9') ? Num::kInt : Num::kEnd;
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
    case 't': mode_ = Mode::kLiteral, lit_ = 0, lit_pos_ = 1; return true;
    case 'f': mode_ = Mode::kLiteral, lit_ = 1, lit_pos_ = 1; return true;
    case 'n': mode_ = Mode::kLiteral, lit_ = 2, lit_pos_ = 1; return true;
    default:
      num_ = NumberStart(c);
      if (num_ == Num::kEnd) return false;
      mode_ = Mode::kNumber;
      return true;
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
      if (!NumberEnds(num_)) return false;
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

}  // namespace pg::runtime
