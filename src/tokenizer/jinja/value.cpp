#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/status.h"

namespace pg::jinja {

// ---------------------------------------------------------------------------------------------
// Dict / CallArgs

const Value* Dict::Find(const Value& key) const {
  for (const auto& [k, v] : entries) {
    if (k.Equals(key)) return &v;
  }
  return nullptr;
}

Value* Dict::Find(const Value& key) {
  for (auto& [k, v] : entries) {
    if (k.Equals(key)) return &v;
  }
  return nullptr;
}

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

void Dict::Set(const Value& key, Value value) {
  if (Value* v = Find(key)) {
    *v = std::move(value);
  } else {
    entries.emplace_back(key, std::move(value));
  }
}

const Value* CallArgs::Get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Construction

Value Value::Undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), b_(b), i_(b ? 1 : 0) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double d) : kind_(Kind::kFloat), d_(d) {}
Value::Value(std::string s) : kind_(Kind::kString), s_(std::make_shared<std::string>(std::move(s))) {}

Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::Markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value Value::Generator(ValueList items) {
  Value v = List(std::move(items));
  v.generator_ = true;
  return v;
}

Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::MakeDict(Dict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(dict));
  return v;
}

Value Value::MakeNamespace(Dict dict) {
  Value v = MakeDict(std::move(dict));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::Function(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

namespace {
// JSON nested deeper than this (from a request) is rejected instead of recursing without bound.
constexpr int kMaxJsonDepth = 256;

template <typename Json>
Value FromJsonImpl(const Json& j, int depth = 0) {
  if (depth > kMaxJsonDepth) {
    Throw(ErrorCode::kInvalidArgument, "chat template input: JSON nested more than {} levels deep", kMaxJsonDepth);
  }
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::None();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJsonImpl(e, depth + 1));
      return Value::List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      d.entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.entries.emplace_back(Value(it.key()), FromJsonImpl(it.value(), depth + 1));
      }
      return Value::MakeDict(std::move(d));
    }
    default:
      Throw(ErrorCode::kInvalidArgument, "chat template: unsupported JSON value (binary/discarded)");
  }
}
}  // namespace

Value Value::FromJson(const nlohmann::ordered_json& j) { return FromJsonImpl(j); }
Value Value::FromJson(const nlohmann::json& j) { return FromJsonImpl(j); }

double Value::as_double() const {
  if (kind_ == Kind::kFloat) return d_;
  return static_cast<double>(i_);
}

// ---------------------------------------------------------------------------------------------
// Conversions

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return d_ != 0.0;
    case Kind::kString: return !s_->empty();
    case Kind::kList:
    case Kind::kTuple: return generator_ || !list_->empty();
    case Kind::kDict: return !dict_->entries.empty();
    case Kind::kNamespace:
    case Kind::kCallable: return true;
  }
  return false;
}

std::string FormatPythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-d.ddde+XX", shortest round-trip digits
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  int exp10 = std::stoi(sci.substr(e_pos + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 >= 0) {
      std::string int_part = digits.substr(0, std::min<size_t>(digits.size(), exp10 + 1));
      while (int_part.size() < static_cast<size_t>(exp10 + 1)) int_part += '0';
      std::string frac = digits.size() > static_cast<size_t>(exp10 + 1) ? digits.substr(exp10 + 1) : "0";
      out += int_part + "." + frac;
    } else {
      out += "0." + std::string(-exp10 - 1, '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += ebuf;
  }
  return out;
}

std::string PythonStringRepr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) { out += '\\'; out += quote; }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

namespace {
// Decodes one UTF-8 code point at s[i]; returns its byte length (1 for an invalid byte).
size_t DecodeUtf8(const std::string& s, size_t i, uint32_t* cp) {
  unsigned char c = s[i];
  size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || i + len > s.size()) {
    *cp = c;
    return 1;
  }
  uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < len; ++k) {
    unsigned char cc = s[i + k];
    if ((cc >> 6) != 0x2) {
      *cp = c;
      return 1;
    }
    v = (v << 6) | (cc & 0x3F);
  }
  *cp = v;
  return len;
}
}  // namespace

void AppendJsonString(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20) {
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    uint32_t cp;
    size_t len = DecodeUtf8(s, i, &cp);
    if (!ensure_ascii) {
      out.append(s, i, len);
    } else if (cp >= 0x10000) {
      uint32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      out += buf;
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      out += buf;
    }
    i += len;
  }
  out += '"';
}

std::vector<std::string> SplitCodepoints(const std::string& s) {
  std::vector<std::string> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    size_t len = DecodeUtf8(s, i, &cp);
    out.emplace_back(s, i, len);
    i += len;
  }
  return out;
}

size_t CodepointCount(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return *s_;
    default: break;
  }
  return Repr();
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return FormatPythonFloat(d_);
    case Kind::kString: return PythonStringRepr(*s_);
    case Kind::kList:
    case Kind::kTuple: {
      if (generator_) return "<generator object>";
      bool tuple = kind_ == Kind::kTuple;
      std::string out = tuple ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].Repr();
      }
      if (tuple && list_->size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      std::string out = kind_ == Kind::kNamespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : dict_->entries) {
        if (!first) out += ", ";
        first = false;
        out += k.Repr() + ": " + v.Repr();
      }
      out += kind_ == Kind::kNamespace ? "}>" : "}";
      return out;
    }
    case Kind::kCallable: return "<function " + fn_->name + ">";
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return generator_ ? "generator" : "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "function";
  }
  return "?";
}

namespace {
std::string JsonKey(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString: return k.str();
    case Value::Kind::kNone: return "null";
    case Value::Kind::kBool: return k.as_bool() ? "true" : "false";
    case Value::Kind::kInt: return std::to_string(k.as_int());
    case Value::Kind::kFloat: return FormatPythonFloat(k.as_double());
    default:
      Throw(ErrorCode::kInvalidArgument,
            "chat template: keys must be str, int, float, bool or None, not {}", k.TypeName());
  }
}

void DumpJson(const Value& v, const Value::JsonOptions& o, int depth, std::string& out) {
  const std::string item_sep = o.has_separators ? o.item_separator : (o.indent >= 0 ? "," : ", ");
  const std::string key_sep = o.has_separators ? o.key_separator : ": ";
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(o.indent) * d, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += FormatPythonFloat(d);
      return;
    }
    case Value::Kind::kString: AppendJsonString(out, v.str(), o.ensure_ascii); return;
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      if (v.is_generator()) {
        Throw(ErrorCode::kInvalidArgument, "Object of type generator is not JSON serializable");
      }
      const ValueList& items = v.list();
      if (items.empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (o.indent >= 0) newline(depth + 1);
        DumpJson(items[i], o, depth + 1, out);
      }
      if (o.indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, val] : v.dict().entries) items.emplace_back(JsonKey(k), &val);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      if (items.empty()) { out += "{}"; return; }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (o.indent >= 0) newline(depth + 1);
        AppendJsonString(out, items[i].first, o.ensure_ascii);
        out += key_sep;
        DumpJson(*items[i].second, o, depth + 1, out);
      }
      if (o.indent >= 0) newline(depth);
      out += '}';
      return;
    }
    default:
      Throw(ErrorCode::kInvalidArgument, "chat template: Object of type {} is not JSON serializable",
            v.TypeName());
  }
}
}  // namespace

std::string Value::ToJsonString(const JsonOptions& options) const {
  std::string out;
  DumpJson(*this, options, 0, out);
  return out;
}

nlohmann::ordered_json Value::ToJson() const {
  switch (kind_) {
    case Kind::kNone: return nullptr;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_;
    case Kind::kFloat: return d_;
    case Kind::kString: return *s_;
    case Kind::kList:
    case Kind::kTuple: {
      auto arr = nlohmann::ordered_json::array();
      for (const auto& e : *list_) arr.push_back(e.ToJson());
      return arr;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      auto obj = nlohmann::ordered_json::object();
      for (const auto& [k, v] : dict_->entries) obj[JsonKey(k)] = v.ToJson();
      return obj;
    }
    default:
      Throw(ErrorCode::kInvalidArgument, "chat template: Object of type {} is not JSON serializable",
            TypeName());
  }
}

// ---------------------------------------------------------------------------------------------
// Comparison

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (kind_ == Kind::kFloat || other.kind_ == Kind::kFloat) return as_double() == other.as_double();
    return i_ == other.i_;
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return *s_ == *other.s_;
    case Kind::kList:
    case Kind::kTuple: {
      if (list_->size() != other.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*other.list_)[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict_->entries.size() != other.dict_->entries.size()) return false;
      for (const auto& [k, v] : dict_->entries) {
        const Value* ov = other.dict_->Find(k);
        if (!ov || !v.Equals(*ov)) return false;
      }
      return true;
    }
    default: return dict_ == other.dict_ && fn_ == other.fn_;
  }
}

bool Value::Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order == code point order
  if (a.is_sequence_like() && b.kind() == a.kind()) {
    const ValueList& x = a.list();
    const ValueList& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!x[i].Equals(y[i])) return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  Throw(ErrorCode::kInvalidArgument, "'<' not supported between instances of '{}' and '{}'",
        a.TypeName(), b.TypeName());
}

}  // namespace pg::jinja
