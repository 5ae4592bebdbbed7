// Methods of str / list / dict values (what templates call: s.strip(), d.get(k), ...) and the
// template globals (range, dict, namespace, raise_exception, strftime_now).
#include <algorithm>
#include <cctype>
#include <ctime>

#include "tokenizer/jinja/interpreter.h"

namespace pg::jinja {
namespace {

[[noreturn]] void Fail(const std::string& message) { throw EvalError(message); }

bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

const std::string& StrArg(const CallArgs& a, size_t i, std::string_view name, const char* method) {
  const Value* v = a.Get(i, name);
  if (!v || !v->is_string()) Fail(fmt::format("{}() argument '{}' must be str", method, name));
  return v->str();
}

int64_t IntArg(const CallArgs& a, size_t i, std::string_view name, int64_t dflt) {
  const Value* v = a.Get(i, name);
  if (!v || v->is_none()) return dflt;
  if (!v->is_int() && !v->is_bool()) Fail(fmt::format("argument '{}' must be an integer", name));
  return v->as_int();
}

}  // namespace

std::string StripChars(const std::string& s, const Value* chars, bool left, bool right) {
  auto strip_it = [&](char c) {
    if (!chars || chars->is_none()) return IsWs(c);
    return chars->str().find(c) != std::string::npos;
  };
  size_t b = 0, e = s.size();
  if (left) while (b < e && strip_it(s[b])) ++b;
  if (right) while (e > b && strip_it(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string PyTitle(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (unsigned char c : s) {
    bool alpha = std::isalpha(c) || c >= 0x80;
    if (std::isalpha(c)) out += static_cast<char>(prev_cased ? std::tolower(c) : std::toupper(c));
    else out += static_cast<char>(c);
    prev_cased = alpha;
  }
  return out;
}

std::string AsciiMap(const std::string& s, int (*f)(int)) {
  std::string out = s;
  for (auto& c : out) {
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  }
  return out;
}

std::string Capitalize(const std::string& s) {
  std::string out = AsciiMap(s, [](int c) { return std::tolower(c); });
  if (!out.empty() && static_cast<unsigned char>(out[0]) < 0x80) out[0] = static_cast<char>(std::toupper(out[0]));
  return out;
}

std::string ReplaceAll(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) {  // Python inserts `to` between every code point
    std::string out;
    int64_t n = 0;
    auto chars = SplitCodepoints(s);
    for (size_t i = 0; i <= chars.size(); ++i) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (i < chars.size()) out += chars[i];
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++n;
  }
  out.append(s, pos);
  return out;
}

ValueList PySplit(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (!sep || sep->is_none()) {
    // Runs of whitespace separate; leading/trailing whitespace is ignored.
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && IsWs(s[i])) ++i;
      if (i >= s.size()) break;
      size_t b = i;
      while (i < s.size() && !IsWs(s[i])) ++i;
      words.emplace_back(b, i);
    }
    if (maxsplit < 0 || static_cast<int64_t>(words.size()) <= maxsplit + 1) {
      for (auto [b, e] : words) parts.push_back(s.substr(b, e - b));
    } else if (!from_right) {
      for (int64_t k = 0; k < maxsplit; ++k) parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
      parts.push_back(s.substr(words[maxsplit].first));
    } else {
      size_t keep = words.size() - maxsplit;
      parts.push_back(s.substr(0, words[keep - 1].second));
      for (size_t k = keep; k < words.size(); ++k) parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
    }
  } else {
    if (!sep->is_string()) Fail("must be str or None");
    const std::string& d = sep->str();
    if (d.empty()) Fail("empty separator");
    if (!from_right) {
      size_t pos = 0;
      int64_t n = 0;
      while (maxsplit < 0 || n < maxsplit) {
        size_t hit = s.find(d, pos);
        if (hit == std::string::npos) break;
        parts.push_back(s.substr(pos, hit - pos));
        pos = hit + d.size();
        ++n;
      }
      parts.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      int64_t n = 0;
      std::vector<std::string> rev;
      while ((maxsplit < 0 || n < maxsplit) && end >= d.size()) {
        size_t hit = s.rfind(d, end - d.size());
        if (hit == std::string::npos) break;
        rev.push_back(s.substr(hit + d.size(), end - hit - d.size()));
        end = hit;
        ++n;
      }
      rev.push_back(s.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
  }
  ValueList out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

namespace {

int64_t CodepointIndex(const std::string& s, size_t byte_pos) {
  return byte_pos == std::string::npos ? -1 : static_cast<int64_t>(CodepointCount(s.substr(0, byte_pos)));
}

bool AffixMatch(const std::string& s, const Value& arg, bool prefix) {
  auto one = [&](const Value& v) {
    if (!v.is_string()) Fail("startswith/endswith first arg must be str or a tuple of str");
    const std::string& a = v.str();
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (arg.is_sequence_like()) {
    for (const auto& v : arg.list()) {
      if (one(v)) return true;
    }
    return false;
  }
  return one(arg);
}

// str.format with {} / {0} / {name}; format specs are not supported.
std::string PyFormat(const std::string& f, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') { out += '{'; ++i; continue; }
    if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') { out += '}'; ++i; continue; }
    if (c != '{') { out += c; continue; }
    size_t close = f.find('}', i);
    if (close == std::string::npos) Fail("Single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    if (field.find(':') != std::string::npos || field.find('!') != std::string::npos) {
      Fail("format specs in str.format are not supported");
    }
    const Value* v;
    if (field.empty()) v = a.Get(auto_index++, "\x01");
    else if (std::all_of(field.begin(), field.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); }))
      v = a.Get(field.size() > 9 ? SIZE_MAX : std::strtoul(field.c_str(), nullptr, 10), "\x01");
    else v = a.Get(SIZE_MAX, field);
    if (!v) Fail(fmt::format("format field '{}' has no argument", field));
    out += v->ToString();
    i = close;
  }
  return out;
}

Value StrMethod(const Value& obj, const std::string& name) {
  static const char* kNames[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
                                 "replace", "upper", "lower", "title", "capitalize", "find", "rfind",
                                 "index", "count", "format", "join", "isspace", "isdigit", "isalpha",
                                 "isalnum", "islower", "isupper", "splitlines"};
  if (std::find(std::begin(kNames), std::end(kNames), name) == std::end(kNames)) return Value();
  return Value::Function(name, [obj, name](const CallArgs& a, Interpreter&) -> Value {
    const std::string& s = obj.str();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Value* chars = a.Get(0, "chars");
      if (chars && !chars->is_none() && !chars->is_string()) Fail(name + " arg must be None or str");
      return Value(StripChars(s, chars, name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
      return Value::List(PySplit(s, a.Get(0, "sep"), IntArg(a, 1, "maxsplit", -1), name == "rsplit"));
    }
    if (name == "splitlines") {
      ValueList out;
      size_t pos = 0;
      while (pos < s.size()) {
        size_t nl = s.find('\n', pos);
        if (nl == std::string::npos) nl = s.size();
        out.emplace_back(s.substr(pos, nl - pos));
        pos = nl + 1;
      }
      return Value::List(std::move(out));
    }
    if (name == "startswith" || name == "endswith") {
      const Value* arg = a.Get(0, "prefix");
      if (!arg) Fail(name + "() takes at least 1 argument (0 given)");
      return Value(AffixMatch(s, *arg, name == "startswith"));
    }
    if (name == "replace") {
      return Value(ReplaceAll(s, StrArg(a, 0, "old", "replace"), StrArg(a, 1, "new", "replace"),
                              IntArg(a, 2, "count", -1)));
    }
    if (name == "upper") return Value(AsciiMap(s, [](int c) { return std::toupper(c); }));
    if (name == "lower") return Value(AsciiMap(s, [](int c) { return std::tolower(c); }));
    if (name == "title") return Value(PyTitle(s));
    if (name == "capitalize") return Value(Capitalize(s));
    if (name == "find" || name == "rfind" || name == "index") {
      const std::string& sub = StrArg(a, 0, "sub", name.c_str());
      size_t hit = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (name == "index" && hit == std::string::npos) Fail("substring not found");
      return Value(CodepointIndex(s, hit));
    }
    if (name == "count") {
      const std::string& sub = StrArg(a, 0, "sub", "count");
      if (sub.empty()) return Value(static_cast<int64_t>(CodepointCount(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
    if (name == "format") return Value(PyFormat(s, a));
    if (name == "join") {
      const Value* items = a.Get(0, "iterable");
      if (!items) Fail("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const auto& v : Iterate(*items)) {
        if (!v.is_string()) Fail(fmt::format("sequence item: expected str instance, {} found", v.TypeName()));
        if (!first) out += s;
        first = false;
        out += v.str();
      }
      return Value(std::move(out));
    }
    auto all = [&](int (*pred)(int)) {
      return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)) != 0; });
    };
    if (name == "isspace") return Value(all([](int c) { return static_cast<int>(IsWs(static_cast<char>(c))); }));
    if (name == "isdigit") return Value(all([](int c) { return std::isdigit(c); }));
    if (name == "isalpha") return Value(all([](int c) { return std::isalpha(c); }));
    if (name == "isalnum") return Value(all([](int c) { return std::isalnum(c); }));
    bool has_cased = std::any_of(s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; });
    if (name == "islower") return Value(has_cased && !std::any_of(s.begin(), s.end(), [](char c) { return std::isupper(static_cast<unsigned char>(c)) != 0; }));
    return Value(has_cased && !std::any_of(s.begin(), s.end(), [](char c) { return std::islower(static_cast<unsigned char>(c)) != 0; }));
  });
}

Value Unsafe(const Value& obj, const std::string& name) {
  std::string type = obj.TypeName();
  return Value::Function(name, [type, name](const CallArgs&, Interpreter&) -> Value {
    Fail(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type));
  });
}

Value ListMethod(Interpreter& in, const Value& obj, const std::string& name) {
  if (name == "index" || name == "count") {
    return Value::Function(name, [obj, name](const CallArgs& a, Interpreter&) -> Value {
      const Value* x = a.Get(0, "value");
      if (!x) Fail(name + "() takes exactly one argument");
      int64_t n = 0;
      for (size_t i = 0; i < obj.list().size(); ++i) {
        if (!obj.list()[i].Equals(*x)) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") Fail(fmt::format("{} is not in list", x->Repr()));
      return Value(n);
    });
  }
  static const char* kMutating[] = {"append", "pop", "insert", "extend", "remove", "clear", "sort", "reverse"};
  if (std::find(std::begin(kMutating), std::end(kMutating), name) == std::end(kMutating)) return Value();
  if (!obj.is_list() || !in.options().allow_mutation) return Unsafe(obj, name);
  return Value::Function(name, [obj, name](const CallArgs& a, Interpreter&) -> Value {
    ValueList& l = obj.list();
    if (name == "append") {
      if (a.positional.size() != 1) Fail("append() takes exactly one argument");
      l.push_back(a.positional[0]);
      return Value::None();
    }
    if (name == "extend") {
      for (const auto& v : Iterate(a.positional.empty() ? Value() : a.positional[0])) l.push_back(v);
      return Value::None();
    }
    if (name == "pop") {
      if (l.empty()) Fail("pop from empty list");
      int64_t i = IntArg(a, 0, "index", -1);
      if (i < 0) i += static_cast<int64_t>(l.size());
      if (i < 0 || i >= static_cast<int64_t>(l.size())) Fail("pop index out of range");
      Value v = l[static_cast<size_t>(i)];
      l.erase(l.begin() + i);
      return v;
    }
    if (name == "insert") {
      int64_t i = std::clamp<int64_t>(IntArg(a, 0, "index", 0), 0, static_cast<int64_t>(l.size()));
      const Value* v = a.Get(1, "object");
      if (!v) Fail("insert expected 2 arguments");
      l.insert(l.begin() + i, *v);
      return Value::None();
    }
    if (name == "clear") { l.clear(); return Value::None(); }
    if (name == "reverse") { std::reverse(l.begin(), l.end()); return Value::None(); }
    Fail(fmt::format("list.{}() is not supported", name));
  });
}

Value DictMethod(Interpreter& in, const Value& obj, const std::string& name) {
  if (name == "get") {
    return Value::Function(name, [obj](const CallArgs& a, Interpreter&) -> Value {
      const Value* key = a.Get(0, "key");
      if (!key) Fail("get expected at least 1 argument, got 0");
      if (const Value* v = obj.dict().Find(*key)) return *v;
      const Value* dflt = a.Get(1, "default");
      return dflt ? *dflt : Value::None();
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return Value::Function(name, [obj, name](const CallArgs&, Interpreter&) -> Value {
      ValueList out;
      for (const auto& [k, v] : obj.dict().entries) {
        if (name == "items") out.push_back(Value::Tuple({k, v}));
        else out.push_back(name == "keys" ? k : v);
      }
      return Value::List(std::move(out));
    });
  }
  static const char* kMutating[] = {"pop", "update", "setdefault", "clear", "popitem"};
  if (std::find(std::begin(kMutating), std::end(kMutating), name) == std::end(kMutating)) return Value();
  if (!in.options().allow_mutation) return Unsafe(obj, name);
  return Value::Function(name, [obj, name](const CallArgs& a, Interpreter&) -> Value {
    auto& entries = obj.dict().entries;
    if (name == "update") {
      if (!a.positional.empty() && a.positional[0].is_mapping()) {
        for (const auto& [k, v] : a.positional[0].dict().entries) obj.dict().Set(k, v);
      }
      for (const auto& [k, v] : a.keyword) obj.dict().Set(Value(k), v);
      return Value::None();
    }
    if (name == "clear") { entries.clear(); return Value::None(); }
    const Value* key = a.Get(0, "key");
    if (!key) Fail(name + "() needs a key");
    auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.first.Equals(*key); });
    if (name == "setdefault") {
      if (it != entries.end()) return it->second;
      Value dflt = a.positional.size() > 1 ? a.positional[1] : Value::None();
      entries.emplace_back(*key, dflt);
      return dflt;
    }
    if (it == entries.end()) {
      if (a.positional.size() > 1) return a.positional[1];
      Fail(fmt::format("KeyError: {}", key->Repr()));
    }
    Value v = it->second;
    entries.erase(it);
    return v;
  });
}

}  // namespace

Value GetMethod(Interpreter& in, const Value& obj, const std::string& name) {
  if (obj.is_string()) return StrMethod(obj, name);
  if (obj.is_sequence_like()) return ListMethod(in, obj, name);
  if (obj.is_dict()) return DictMethod(in, obj, name);
  return Value();
}

void AddGlobals(Interpreter& in, Frame& g) {
  (void)in;
  g.Slot("range") = Value::Function("range", [](const CallArgs& a, Interpreter&) -> Value {
    if (a.positional.empty() || a.positional.size() > 3) Fail("range expected 1 to 3 arguments");
    for (const auto& v : a.positional) {
      if (!v.is_int() && !v.is_bool()) Fail(fmt::format("'{}' object cannot be interpreted as an integer", v.TypeName()));
    }
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
      stop = a.positional[0].as_int();
    } else {
      start = a.positional[0].as_int();
      stop = a.positional[1].as_int();
      if (a.positional.size() == 3) step = a.positional[2].as_int();
    }
    if (step == 0) Fail("range() arg 3 must not be zero");
    constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox MAX_RANGE
    int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                             : (start > stop ? (start - stop - step - 1) / -step : 0);
    if (count > kMaxRange) Fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    ValueList out;
    for (int64_t i = 0, v = start; i < count; ++i, v += step) out.emplace_back(v);
    return Value::List(std::move(out));
  });
  auto make_dict = [](const CallArgs& a, bool ns) {
    Dict d;
    if (!a.positional.empty()) {
      const Value& src = a.positional[0];
      if (src.is_mapping()) {
        for (const auto& [k, v] : src.dict().entries) d.Set(k, v);
      } else {
        for (const auto& item : Iterate(src)) {
          ValueList kv = Iterate(item);
          if (kv.size() != 2) Fail("dictionary update sequence element has wrong length; 2 is required");
          d.Set(kv[0], kv[1]);
        }
      }
    }
    for (const auto& [k, v] : a.keyword) d.Set(Value(k), v);
    return ns ? Value::MakeNamespace(std::move(d)) : Value::MakeDict(std::move(d));
  };
  g.Slot("dict") = Value::Function("dict", [make_dict](const CallArgs& a, Interpreter&) { return make_dict(a, false); });
  g.Slot("namespace") =
      Value::Function("namespace", [make_dict](const CallArgs& a, Interpreter&) { return make_dict(a, true); });
  g.Slot("raise_exception") = Value::Function("raise_exception", [](const CallArgs& a, Interpreter&) -> Value {
    const Value* msg = a.Get(0, "message");
    throw TemplateError(msg ? msg->ToString() : std::string("raise_exception() called"), true);
  });
  g.Slot("strftime_now") = Value::Function("strftime_now", [](const CallArgs& a, Interpreter& interp) -> Value {
    const Value* f = a.Get(0, "format");
    if (!f || !f->is_string()) Fail("strftime_now() needs a format string");
    std::tm tm{};
    if (interp.options().now) {
      tm = *interp.options().now;
    } else {
      std::time_t t = std::time(nullptr);
      localtime_r(&t, &tm);
    }
    char buf[512];
    size_t n = std::strftime(buf, sizeof(buf), f->str().c_str(), &tm);
    return Value(std::string(buf, n));
  });
}

}  // namespace pg::jinja
