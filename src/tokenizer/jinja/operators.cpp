// Python semantics of the binary operators, `in`, and iteration.
#include <cmath>

#include "tokenizer/jinja/interpreter.h"

namespace pg::jinja {
namespace {

[[noreturn]] void Fail(const std::string& message) { throw EvalError(message); }

[[noreturn]] void Unsupported(const std::string& op, const Value& a, const Value& b) {
  Fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.TypeName(), b.TypeName()));
}

// Python ints are unbounded; ours are 64-bit, and overflow is an error rather than UB.
[[noreturn]] void Overflow() { Fail("integer overflow (integers beyond 64 bits are not supported)"); }
int64_t CheckedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) Overflow();
  return r;
}
int64_t CheckedSub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) Overflow();
  return r;
}
int64_t CheckedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) Overflow();
  return r;
}

int64_t FloorDiv(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) Fail("integer overflow (integers beyond 64 bits are not supported)");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t PyMod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double PyFMod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value Repeat(const Value& seq, int64_t n) {
  constexpr int64_t kMaxRepeatItems = int64_t{1} << 26;  // 64 Mi bytes/items: a template bug, not a prompt
  int64_t unit = seq.is_string() ? static_cast<int64_t>(seq.str().size()) : static_cast<int64_t>(seq.list().size());
  if (n > 0 && unit > 0 && n > kMaxRepeatItems / unit) Fail("repetition result too large");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return seq.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

// printf-style `'%s' % value` for the conversions templates use (%s %r %d %i %f %%).
Value PercentFormat(const std::string& fmt_str, const Value& arg) {
  ValueList args = arg.is_tuple() ? arg.list() : ValueList{arg};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    if (fmt_str[i] != '%') {
      out += fmt_str[i];
      continue;
    }
    if (++i >= fmt_str.size()) Fail("incomplete format");
    char c = fmt_str[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= args.size()) Fail("not enough arguments for format string");
    const Value& v = args[next++];
    if (c == 's') out += v.ToString();
    else if (c == 'r') out += v.Repr();
    else if ((c == 'd' || c == 'i') && v.is_number()) out += std::to_string(static_cast<int64_t>(v.as_double()));
    else if (c == 'f' && v.is_number()) out += fmt::format("{:.6f}", v.as_double());
    else Fail(fmt::format("unsupported format character '{}'", c));
  }
  if (next < args.size()) Fail("not all arguments converted during string formatting");
  return Value(std::move(out));
}

}  // namespace

ValueList Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList:
    case Value::Kind::kTuple: return v.list();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& [k, val] : v.dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList out;
      for (auto& c : SplitCodepoints(v.str())) out.emplace_back(std::move(c));
      return out;
    }
    default: Fail(fmt::format("'{}' object is not iterable", v.TypeName()));
  }
}

bool Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (item.is_undefined()) return false;
      if (!item.is_string()) Fail(fmt::format("'in <string>' requires string as left operand, not {}", item.TypeName()));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      for (const auto& v : container.list()) {
        if (v.Equals(item)) return true;
      }
      return false;
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: return container.dict().Find(item) != nullptr;
    default: Fail(fmt::format("argument of type '{}' is not iterable", container.TypeName()));
  }
}

Value BinaryOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.ToString() + b.ToString());
  if (op == "==") return Value(a.Equals(b));
  if (op == "!=") return Value(!a.Equals(b));
  if (op == "in") return Value(Contains(b, a));
  if (op == "notin") return Value(!Contains(b, a));
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    if (a.is_undefined() || b.is_undefined()) Fail(a.is_undefined() ? a.str() : b.str());
    if (op == "<") return Value(Value::Less(a, b));
    if (op == ">") return Value(Value::Less(b, a));
    if (op == "<=") return Value(!Value::Less(b, a));
    return Value(!Value::Less(a, b));
  }
  // Arithmetic: an undefined operand raises, as jinja2's default Undefined does.
  if (a.is_undefined()) Fail(a.str());
  if (b.is_undefined()) Fail(b.str());
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) return Value(CheckedAdd(a.as_int(), b.as_int()));
    if (nums) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      if (a.is_markup() || b.is_markup()) {
        return Value::Markup((a.is_markup() ? a.str() : HtmlEscape(a.str())) +
                             (b.is_markup() ? b.str() : HtmlEscape(b.str())));
      }
      return Value(a.str() + b.str());
    }
    if (a.is_sequence_like() && a.kind() == b.kind() && !a.is_generator() && !b.is_generator()) {
      ValueList out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return a.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
    }
    if (a.is_string()) Fail(fmt::format("can only concatenate str (not \"{}\") to str", b.TypeName()));
    if (a.is_list()) Fail(fmt::format("can only concatenate list (not \"{}\") to list", b.TypeName()));
    Unsupported("+", a, b);
  }
  if (op == "-") {
    if (ints) return Value(CheckedSub(a.as_int(), b.as_int()));
    if (nums) return Value(a.as_double() - b.as_double());
    Unsupported("-", a, b);
  }
  if (op == "*") {
    if (ints) return Value(CheckedMul(a.as_int(), b.as_int()));
    if (nums) return Value(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_sequence_like()) && (b.is_int() || b.is_bool())) return Repeat(a, b.as_int());
    if ((b.is_string() || b.is_sequence_like()) && (a.is_int() || a.is_bool())) return Repeat(b, a.as_int());
    Unsupported("*", a, b);
  }
  if (op == "/") {
    if (!nums) Unsupported("/", a, b);
    if (b.as_double() == 0) Fail("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!nums) Unsupported("//", a, b);
    if (b.as_double() == 0) Fail("integer division or modulo by zero");
    if (ints) return Value(FloorDiv(a.as_int(), b.as_int()));
    return Value(std::floor(a.as_double() / b.as_double()));
  }
  if (op == "%") {
    if (a.is_string()) return PercentFormat(a.str(), b);
    if (!nums) Unsupported("%", a, b);
    if (b.as_double() == 0) Fail("integer division or modulo by zero");
    if (ints) return Value(PyMod(a.as_int(), b.as_int()));
    return Value(PyFMod(a.as_double(), b.as_double()));
  }
  if (op == "**") {
    if (!nums) Unsupported("** or pow()", a, b);
    if (ints && b.as_int() >= 0) {
      int64_t r = 1, base = a.as_int();  // square-and-multiply: O(log exponent)
      for (int64_t e = b.as_int(); e > 0; e >>= 1) {
        if (e & 1) r = CheckedMul(r, base);
        if (e > 1) base = CheckedMul(base, base);
      }
      return Value(r);
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  Fail(fmt::format("unknown operator '{}'", op));
}

}  // namespace pg::jinja
