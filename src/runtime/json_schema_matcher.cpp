// SchemaMatcher: each byte advances every open parse (a stack of frames over JsonSchema's
// nodes); a parse that cannot take the byte dies, anyOf and an enum value that may end or go
// on (1 / 12) fork. Values that end only when the next byte arrives (numbers, literals) are
// closed by that byte, which is then read by the enclosing frame.
#include <algorithm>
#include <cstring>

#include "core/utf8.h"
#include "runtime/json_constraint.h"
#include "runtime/json_schema.h"

namespace pg::runtime {
namespace {

using Kind = JsonSchema::Kind;
using Num = JsonMatcher::Num;
constexpr int kMaxWs = JsonMatcher::kMaxWhitespace;

// Frame phases. Containers: kOpen (after '{' / '['), kNext (after ','), kColon (after a key),
// kValue (after ':' or an array's ','), kAfter (after a value). Strings: kChars, kEscape,
// kHex (aux: hex digits left).
enum : uint8_t { kOpen, kNext, kColon, kValue, kAfter };
enum : uint8_t { kChars, kEscape, kHex };
enum : uint8_t { kRootStart, kRootDone };

bool IsWs(uint8_t c) { return JsonMatcher::IsWs(c); }

// The sorted candidates lits[a, b) that agree with byte c at position pos: a sub-range (the
// range shares its first pos bytes, so those with byte c there are contiguous).
std::pair<uint32_t, uint32_t> Narrow(const std::vector<std::string>& lits, uint32_t a, uint32_t b,
                                     size_t pos, uint8_t c) {
  auto byte_at = [&](uint32_t i) { return lits[i].size() > pos ? int(uint8_t(lits[i][pos])) : -1; };
  uint32_t lo = a, hi = b;
  while (lo < hi) {  // first with byte >= c
    const uint32_t m = (lo + hi) / 2;
    if (byte_at(m) < int(c)) lo = m + 1;
    else hi = m;
  }
  uint32_t end = lo;
  hi = b;
  while (end < hi) {  // first with byte > c
    const uint32_t m = (end + hi) / 2;
    if (byte_at(m) <= int(c)) end = m + 1;
    else hi = m;
  }
  return {lo, end};
}

// An object's key window: the properties that may come next are cursor .. the first required
// one at or past it.
bool InWindow(const JsonSchema::Node& obj, uint32_t cursor, int32_t prop) {
  return uint32_t(prop) >= cursor && uint32_t(prop) <= obj.next_required[cursor];
}

}  // namespace

bool SchemaMatcher::Parse::operator==(const Parse& o) const {
  return depth == o.depth && std::memcmp(f.data(), o.f.data(), sizeof(Frame) * size_t(depth)) == 0;
}

SchemaMatcher::SchemaMatcher(const JsonSchema& schema) : schema_(&schema), n_(1) {
  parses_[0].depth = 1;
  parses_[0].f[0] = NewFrame(uint16_t(schema.root()), FrameKind::kRoot, kRootStart);
}

SchemaMatcher& SchemaMatcher::operator=(const SchemaMatcher& o) {
  schema_ = o.schema_;
  n_ = o.n_;
  for (int i = 0; i < n_; ++i) parses_[size_t(i)] = o.parses_[size_t(i)];
  return *this;
}

void SchemaMatcher::Emit(const Parse& p, SchemaMatcher& out) const {
  for (int i = 0; i < out.n_; ++i)
    if (out.parses_[size_t(i)] == p) return;
  if (out.n_ == kMaxParses) return;  // dropped: stricter, never looser
  out.parses_[size_t(out.n_++)] = p;
}

bool SchemaMatcher::Accept(uint8_t c) {
  SchemaMatcher out(*schema_);
  out.n_ = 0;
  for (int i = 0; i < n_; ++i) Feed(parses_[size_t(i)], c, out);
  *this = out;
  return n_ > 0;
}

bool SchemaMatcher::Accept(std::string_view bytes) {
  for (char ch : bytes)
    if (!Accept(uint8_t(ch))) return false;
  return true;
}

namespace {

uint64_t Magnitude(uint32_t lo_word, uint32_t hi_word) { return uint64_t(hi_word) << 32 | lo_word; }

}  // namespace

bool SchemaMatcher::IntegerInRange(const Frame& f, const JsonSchema::Node& n) {
  if (!n.bounded) return true;
  const __int128 m = __int128(Magnitude(f.a, f.b)), v = f.tag ? -m : m;
  return f.aux > 0 && v >= n.lo && v <= n.hi;
}

bool SchemaMatcher::IntegerFeasible(const Frame& f, const JsonSchema::Node& n) {
  if (!n.bounded) return true;
  const __int128 lo = n.lo, hi = n.hi;
  if (f.aux == 0) return f.tag ? lo <= std::min<__int128>(hi, -1) : true;  // "-": some negative in range
  if (Num(f.phase) == Num::kZero) return IntegerInRange(f, n);              // "0" / "-0": no digit follows
  // Values written from here: magnitudes [M 10^k, (M + 1) 10^k - 1] for k more digits.
  __int128 first = __int128(Magnitude(f.a, f.b)), span = 1;
  for (int k = 0; f.aux + k <= 19; ++k, first *= 10, span *= 10) {
    const __int128 last = first + span - 1;
    const __int128 a = f.tag ? -last : first, b = f.tag ? -first : last;
    if (a <= hi && b >= lo) return true;
  }
  return false;
}

bool SchemaMatcher::ParseCanEnd(const Parse& p, const JsonSchema& s) {
  if (p.depth == 1) return p.f[0].phase == kRootDone;
  if (p.depth != 2) return false;
  const Frame& t = p.f[1];
  if (t.kind == FrameKind::kNumber)
    return JsonMatcher::NumberEnds(Num(t.phase)) && IntegerInRange(t, s.node(t.node));
  if (t.kind == FrameKind::kLiteral) return s.node(t.node).lits[t.a].size() == t.aux;
  return false;
}

bool SchemaMatcher::can_end() const {
  for (int i = 0; i < n_; ++i)
    if (ParseCanEnd(parses_[size_t(i)], *schema_)) return true;
  return false;
}

int SchemaMatcher::string_budget() const {
  if (n_ != 1) return -1;
  const Frame& t = parses_[0].top();
  if (t.kind != FrameKind::kString || t.phase != kChars) return -1;
  if (!t.tag && schema_->node(t.node).pattern) return -1;  // every byte moves the pattern's state
  const uint32_t max = t.tag ? JsonSchema::kUnbounded : schema_->node(t.node).max;
  if (max == JsonSchema::kUnbounded) return kUnlimited;
  return int(std::min<uint32_t>(max - std::min(max, t.a), uint32_t(kUnlimited - 1)));
}

RegexView SchemaMatcher::regex_view() const {
  if (n_ != 1) return {};
  const Frame& t = parses_[0].top();
  if (t.kind != FrameKind::kString || t.phase != kChars || t.tag) return {};
  const JsonSchema::Node& n = schema_->node(t.node);
  if (!n.pattern) return {};
  return {.re = n.pattern.get(), .state = int32_t(t.b & 0xFFFF),
          .chars_left = n.max == JsonSchema::kUnbounded ? UINT32_MAX : n.max - std::min(n.max, t.a),
          .plain_only = true};
}

void SchemaMatcher::Complete(Parse p, SchemaMatcher& out, const uint8_t* refeed) const {
  const Frame done = p.top();
  --p.depth;
  Frame& t = p.top();
  t.ws = 0;
  switch (t.kind) {
    case FrameKind::kRoot: t.phase = kRootDone; break;
    case FrameKind::kObject:
      if (done.kind == FrameKind::kKey) {
        t.phase = kColon;
        t.b = uint32_t(schema_->node(done.node).lit_prop[done.a]);
      } else {
        const JsonSchema::Node& obj = schema_->node(t.node);
        if (!obj.tag_node.empty() && t.b == 0) t.tag = uint16_t(done.a);  // the name written
        t.phase = kAfter;
        t.a = t.b + 1;  // the cursor passes the property just written
      }
      break;
    case FrameKind::kMap: t.phase = done.kind == FrameKind::kString && done.tag ? kColon : kAfter; break;
    case FrameKind::kArray:
      ++t.a;
      t.phase = kAfter;
      break;
    default: return;  // scalars hold no values
  }
  if (refeed != nullptr) Feed(p, *refeed, out);
  else Emit(p, out);
}

void SchemaMatcher::StartValue(Parse p, int32_t node_id, uint8_t c, SchemaMatcher& out, int hops) const {
  const JsonSchema::Node& n = schema_->node(node_id);
  if (n.kind == Kind::kAnyOf) {
    if (hops == kMaxDepth) return;  // an anyOf that reaches itself through $ref
    for (int32_t alt : n.alts) StartValue(p, alt, c, out, hops + 1);
    return;
  }
  if (n.kind == Kind::kAny) {
    const int32_t part = c == '{' ? JsonSchema::kAnyMap : c == '[' ? JsonSchema::kAnyArray
                       : c == '"' ? JsonSchema::kAnyString
                       : JsonMatcher::NumberStart(c) != Num::kEnd ? JsonSchema::kAnyNumber
                                                                  : JsonSchema::kAnyLiteral;
    StartValue(p, part, c, out);
    return;
  }
  if (p.depth == kMaxDepth) return;
  Frame f = NewFrame(uint16_t(node_id), FrameKind::kRoot, 0);
  switch (n.kind) {
    case Kind::kObject:
    case Kind::kMap:
      if (c != '{') return;
      f.kind = n.kind == Kind::kObject ? FrameKind::kObject : FrameKind::kMap;
      f.phase = kOpen;
      break;
    case Kind::kArray:
      if (c != '[') return;
      f.kind = FrameKind::kArray, f.phase = kOpen;
      break;
    case Kind::kString:
      if (c != '"') return;
      f.kind = FrameKind::kString, f.phase = kChars;
      break;
    case Kind::kNumber: {
      const Num s = JsonMatcher::NumberStart(c);
      if (s == Num::kEnd) return;
      f.kind = FrameKind::kNumber, f.phase = uint8_t(s);
      if (n.bounded) {
        f.tag = c == '-';
        f.aux = c == '-' ? 0 : 1;
        f.a = c == '-' ? 0 : uint32_t(c - '0');
        if (!IntegerFeasible(f, n)) return;
      }
      break;
    }
    case Kind::kLiteral:
      f.kind = FrameKind::kLiteral, f.a = 0, f.b = uint32_t(n.lits.size());
      p.f[size_t(p.depth++)] = f;
      Feed(p, c, out);  // the literal's first byte
      return;
    default: return;
  }
  p.f[size_t(p.depth++)] = f;
  Emit(p, out);
}

void SchemaMatcher::Feed(Parse p, uint8_t c, SchemaMatcher& out) const {
  Frame& t = p.top();
  const JsonSchema::Node& n = schema_->node(t.node);
  const bool ws = IsWs(c);
  auto whitespace = [&] {
    if (++t.ws <= kMaxWs) Emit(p, out);
  };
  switch (t.kind) {
    case FrameKind::kRoot:
      if (t.phase == kRootDone) return;
      if (ws) return whitespace();
      t.ws = 0;
      return StartValue(p, t.node, c, out);
    case FrameKind::kObject:
    case FrameKind::kMap: {
      const bool object = t.kind == FrameKind::kObject;
      if (ws) return whitespace();
      switch (t.phase) {
        case kOpen:
        case kNext:
          if (c == '"') {  // a key: its frame goes on top; its end sets kColon here
            t.ws = 0;
            if (p.depth == kMaxDepth || (object && t.a >= n.props())) return;
            if (object) {
              p.f[size_t(p.depth++)] = NewFrame(t.node, FrameKind::kKey, 0, 0, uint32_t(n.lits.size()));
              return Feed(p, c, out);
            }
            Frame k = NewFrame(t.node, FrameKind::kString, kChars);
            k.tag = 1;
            p.f[size_t(p.depth++)] = k;
            return Emit(p, out);
          }
          // '}' right after '{' (the cursor is then 0) once nothing required is left.
          if (c == '}' && t.phase == kOpen && (!object || n.next_required[0] == n.props()))
            return Complete(p, out, nullptr);
          return;
        case kColon:
          if (c != ':') return;
          t.phase = kValue, t.ws = 0;
          return Emit(p, out);
        case kValue:
          t.ws = 0;
          if (!object) return StartValue(p, n.child, c, out);
          return StartValue(p, !n.tag_node.empty() && t.b == 1 ? n.tag_node[t.tag] : n.prop_node[t.b], c, out);
        case kAfter:
          if (c == ',') {
            if (object && t.a >= n.props()) return;
            t.phase = kNext, t.ws = 0;
            return Emit(p, out);
          }
          if (c == '}' && (!object || n.next_required[t.a] == n.props())) return Complete(p, out, nullptr);
          return;
      }
      return;
    }
    case FrameKind::kArray:
      if (ws) return whitespace();
      t.ws = 0;
      switch (t.phase) {
        case kOpen:
          if (c == ']') {
            if (n.min == 0) Complete(p, out, nullptr);
            return;
          }
          if (n.max == 0) return;
          t.phase = kValue;
          return StartValue(p, n.child, c, out);
        case kNext:
          t.phase = kValue;
          return StartValue(p, n.child, c, out);
        case kAfter:
          if (c == ',' && t.a < n.max) {
            t.phase = kNext;
            return Emit(p, out);
          }
          if (c == ']' && t.a >= n.min) Complete(p, out, nullptr);
          return;
      }
      return;
    case FrameKind::kString: {
      const uint32_t max = t.tag ? JsonSchema::kUnbounded : n.max, min = t.tag ? 0 : n.min;
      const Regex* re = t.tag ? nullptr : n.pattern.get();
      // With a pattern, the decoded text goes through its automaton, state in b's low 16 bits.
      // Every byte is refused as soon as no match can follow it within maxLength: `left` is
      // the code points a match may still take after the one being written (t.a counts it).
      auto left = [&] { return max == JsonSchema::kUnbounded ? UINT32_MAX : max - std::min(max, t.a); };
      const int32_t state = int32_t(t.b & 0xFFFF);
      auto feed = [&](std::string_view bytes) {  // false: no match within bounds
        int32_t s = state;
        for (char ch : bytes)
          if ((s = re->Next(s, uint8_t(ch))) == Regex::kDead) return false;
        t.b = uint32_t(s);
        return re->min_chars(s) <= left();
      };
      static constexpr std::string_view kEscapes = "\"\\/bfnrt", kDecoded = "\"\\/\b\f\n\r\t";
      switch (t.phase) {
        case kChars:
          if (c == '"') {
            if (t.a >= min && (re == nullptr || re->accepting(state))) Complete(p, out, nullptr);
            return;
          }
          if (c < 0x20) return;
          if ((c & 0xC0) != 0x80) {  // a code point starts (an escape counts as one)
            if (t.a >= max) return;
            ++t.a;
          }
          if (c == '\\') {
            t.phase = kEscape;
            if (re == nullptr) return Emit(p, out);
            const uint32_t after = left();
            bool any = re->AnyCodePointFits(state, 0, 0xFFFF, after);  // \uXXXX
            for (char d : kDecoded)
              if (const int32_t s = re->Next(state, uint8_t(d)); s != Regex::kDead) any = any || re->min_chars(s) <= after;
            if (any) Emit(p, out);
            return;
          }
          if (re != nullptr && !feed(std::string_view(reinterpret_cast<const char*>(&c), 1))) return;
          return Emit(p, out);
        case kEscape: {
          if (c == 'u') {
            if (re != nullptr && !re->AnyCodePointFits(state, 0, 0xFFFF, left())) return;
            t.phase = kHex, t.aux = 4;
            t.b &= 0xFFFF;  // the escape's value accumulates in the high 16 bits
            return Emit(p, out);
          }
          const size_t k = kEscapes.find(char(c));
          if (k == std::string_view::npos || (re != nullptr && !feed(kDecoded.substr(k, 1)))) return;
          t.phase = kChars;
          return Emit(p, out);
        }
        case kHex: {
          if (!JsonMatcher::IsHex(c)) return;
          if (--t.aux == 0) t.phase = kChars;
          if (re == nullptr) return Emit(p, out);
          const uint32_t digit = c <= '9' ? uint32_t(c - '0') : uint32_t((c | 0x20) - 'a' + 10);
          const uint32_t v = (t.b >> 16) * 16 + digit, shift = 4u * t.aux;
          t.b = uint32_t(state) | v << 16;
          if (t.aux > 0) {  // the code points these digits can still become
            if (re->AnyCodePointFits(state, v << shift, ((v + 1) << shift) - 1, left())) Emit(p, out);
            return;
          }
          if (v >= 0xD800 && v <= 0xDFFF) return;  // a surrogate half: refused under a pattern
          std::string u;  // at most 3 bytes: no allocation
          AppendUtf8(&u, v);
          if (feed(u)) Emit(p, out);
          return;
        }
      }
      return;
    }
    case FrameKind::kNumber: {
      const Num next = JsonMatcher::NumberNext(Num(t.phase), c);
      const bool frac = c == '.' || c == 'e' || c == 'E';
      if (next != Num::kEnd && !(n.integer && frac)) {
        t.phase = uint8_t(next);
        if (n.bounded) {  // a digit (integers take no other byte here): the magnitude grows
          const uint64_t m = Magnitude(t.a, t.b);
          if (t.aux >= 19) return;  // past int64 either way
          const uint64_t grown = m * 10 + uint64_t(c - '0');
          t.a = uint32_t(grown), t.b = uint32_t(grown >> 32), ++t.aux;
          if (!IntegerFeasible(t, n)) return;
        }
        return Emit(p, out);
      }
      if (JsonMatcher::NumberEnds(Num(t.phase)) && IntegerInRange(t, n)) Complete(p, out, &c);  // c is read after it
      return;
    }
    case FrameKind::kLiteral:
    case FrameKind::kKey: {
      const bool key = t.kind == FrameKind::kKey;
      // A candidate matched in full may end here: the byte is then the enclosing frame's. (A
      // key is matched with its closing quote, so its range then holds it alone, and the
      // narrowing below kept it only inside the object's window.)
      if (n.lits[t.a].size() == t.aux) Complete(p, out, &c);
      auto [lo, hi] = Narrow(n.lits, t.a, t.b, t.aux, c);
      if (key) {  // keep only names the window allows; the range must still hold one
        const uint32_t cursor = p.f[size_t(p.depth - 2)].a;
        bool any = false;
        for (uint32_t i = lo; i < hi && !any; ++i) any = InWindow(n, cursor, n.lit_prop[i]);
        if (!any) return;
      }
      if (lo == hi || t.aux == 255) return;
      t.a = lo, t.b = hi, ++t.aux;
      return Emit(p, out);
    }
  }
}

std::unique_ptr<OutputConstraint> MakeOutputConstraint(std::shared_ptr<const TokenTable> table,
                                                       std::shared_ptr<const JsonSchema> schema) {
  if (schema == nullptr) return std::make_unique<JsonConstraint>(std::move(table));
  SchemaMatcher m(*schema);
  return std::make_unique<SchemaConstraint>(std::move(table), std::move(m), std::move(schema));
}

}  // namespace pg::runtime
