// JSON mode (OpenAI `response_format: {"type": "json_object"}`): generation constrained to one
// JSON object (RFC 8259 syntax), then an end-of-sequence token.
//
// JsonMatcher is a byte-level pushdown recognizer of a JSON-object prefix. JsonConstraint masks
// a logits row so that only tokens whose bytes keep the generated text such a prefix survive:
// special tokens never (EOS only once the object is closed, and then only EOS). The mask is
// exact: a token is kept iff every byte of it is accepted, so greedy and seeded sampling draw
// from the constrained distribution, not from a filtered unconstrained draw.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "runtime/token_mask.h"

namespace pg::runtime {

class JsonMatcher {
 public:
  static constexpr int kMaxDepth = 64;       // nested objects / arrays
  static constexpr int kMaxWhitespace = 24;  // consecutive whitespace bytes outside strings

  // Feeds one byte; false when it cannot continue a JSON-object prefix. The matcher is then in
  // no defined state: callers try bytes on a copy (it is trivially copyable, ~80 bytes).
  bool Accept(uint8_t c);
  bool Accept(std::string_view bytes);
  // The top-level object is closed: only the end of the sequence may follow.
  bool done() const { return mode_ == Mode::kDone; }
  bool can_end() const { return done(); }
  // Inside a string, where every byte but '"', '\\' and control bytes keeps the state as is.
  bool in_plain_string() const { return mode_ == Mode::kString; }
  int string_budget() const { return in_plain_string() ? kUnlimited : -1; }

  // The number grammar (RFC 8259), shared with SchemaMatcher. Sub-states say which bytes may
  // come next; kEnd: none (NumberNext's answer for a byte that does not continue the number).
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp, kEnd };
  static Num NumberNext(Num s, uint8_t c);
  static Num NumberStart(uint8_t c);     // kEnd unless c may begin a number
  static bool NumberEnds(Num s);         // the number may end in state s
  static bool IsWs(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
  static bool IsHex(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }

 private:
  enum class Mode : uint8_t {
    kStart,          // before the top-level '{' (whitespace allowed)
    kValue,          // a value is expected (after ':' or ',' in an array)
    kFirstKeyOrEnd,  // after '{': a key or '}'
    kKey,            // after ',' in an object: a key
    kColon,          // after a key
    kFirstValueOrEnd,  // after '[': a value or ']'
    kAfterValue,     // after a value inside a container: ',' or the container's close
    kString,         // inside a string (key_ says whether it is a key)
    kEscape,         // after '\\' in a string
    kUnicode,        // in \uXXXX: hex_left_ digits to go
    kNumber,         // in a number: num_ is the sub-state
    kLiteral,        // in true / false / null: lit_ and lit_pos_
    kDone,
  };
  bool ValueStart(uint8_t c);  // c begins a value (mode_ is a value-expecting one)
  bool CloseValue();           // a value just ended: the enclosing container's next mode
  bool Whitespace();           // counts a whitespace byte outside strings (false past the cap)

  Mode mode_ = Mode::kStart;
  Num num_ = Num::kInt;
  bool key_ = false;
  uint8_t hex_left_ = 0;
  uint8_t lit_ = 0, lit_pos_ = 0;  // literal index into kLiterals, bytes matched
  uint8_t ws_ = 0;
  int16_t depth_ = 0;
  std::array<uint8_t, kMaxDepth> stack_{};  // '{' or '['
};

// JSON mode's constraint: one JSON object, then EOS (only EOS once the object is closed).
using JsonConstraint = ByteConstraint<JsonMatcher>;

}  // namespace pg::runtime
