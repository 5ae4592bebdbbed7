// Builtin filters and tests (jinja2's, with Hugging Face's tojson).
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "tokenizer/jinja/interpreter.h"

namespace pg::jinja {
namespace {

[[noreturn]] void Fail(const std::string& message) { throw EvalError(message); }

using FilterFn = Value (*)(Interpreter&, const Value&, const CallArgs&);
using TestFn = bool (*)(Interpreter&, const Value&, const CallArgs&);

bool ArgBool(const CallArgs& a, size_t i, std::string_view name, bool dflt) {
  const Value* v = a.Get(i, name);
  return v ? v->Truthy() : dflt;
}

const Value* Arg(const CallArgs& a, size_t i, std::string_view name) { return a.Get(i, name); }

int64_t Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(CodepointCount(v.str()));
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      if (v.is_generator()) Fail("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: return static_cast<int64_t>(v.dict().entries.size());
    default: Fail(fmt::format("object of type '{}' has no len()", v.TypeName()));
  }
}

// Attribute lookup of filters (map/selectattr/sort attribute=): dotted paths, ints index.
Value AttrPath(Interpreter& in, const Value& item, const std::string& path) {
  Value cur = item;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (cur.is_undefined()) return cur;
    cur = numeric ? in.GetItem(cur, Value(static_cast<int64_t>(std::strtoll(part.c_str(), nullptr, 10)))) : in.GetItem(cur, Value(part));
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

// Sort key: lower-cased strings unless case_sensitive (jinja2's ignore_case).
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(AsciiMap(v.str(), [](int c) { return std::tolower(c); }));
  return v;
}

CallArgs Shift(const CallArgs& a, size_t n) {
  CallArgs out;
  out.positional.assign(a.positional.begin() + std::min(n, a.positional.size()), a.positional.end());
  out.keyword = a.keyword;
  return out;
}

// select/reject/selectattr/rejectattr.
Value Select(Interpreter& in, const Value& seq, const CallArgs& a, bool with_attr, bool keep) {
  size_t next = 0;
  std::string attr;
  if (with_attr) {
    const Value* at = Arg(a, next++, "attribute");
    if (!at || !at->is_string()) Fail("selectattr/rejectattr need an attribute name");
    attr = at->str();
  }
  const Value* test = a.positional.size() > next ? &a.positional[next] : nullptr;
  CallArgs test_args;
  if (test) test_args.positional.assign(a.positional.begin() + next + 1, a.positional.end());
  ValueList out;
  if (!seq.Truthy()) return Value::Generator({});  // jinja2 guards with `if seq:`
  for (const auto& item : Iterate(seq)) {
    Value v = with_attr ? AttrPath(in, item, attr) : item;
    bool r = test ? in.ApplyTest(test->ToString(), v, test_args) : v.Truthy();
    if (r == keep) out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

std::string PyRound(double x, int64_t precision, const std::string& method) {
  (void)method;
  char buf[400];
  std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), x);
  return buf;
}

Value FTojson(Interpreter&, const Value& v, const CallArgs& a) {
  Value::JsonOptions o;
  if (const Value* indent = Arg(a, 0, "indent"); indent && !indent->is_none()) {
    if (!indent->is_int()) Fail("tojson indent must be an integer");
    o.indent = static_cast<int>(std::max<int64_t>(0, indent->as_int()));
  }
  o.ensure_ascii = ArgBool(a, 1, "ensure_ascii", false);
  if (const Value* sep = Arg(a, 2, "separators"); sep && !sep->is_none()) {
    ValueList parts = Iterate(*sep);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string()) Fail("separators must be a (str, str) pair");
    o.has_separators = true;
    o.item_separator = parts[0].str();
    o.key_separator = parts[1].str();
  }
  o.sort_keys = ArgBool(a, 3, "sort_keys", false);
  if (v.is_undefined()) Fail("Object of type Undefined is not JSON serializable");
  return Value(v.ToJsonString(o));
}

Value FTrim(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* chars = Arg(a, 0, "chars");
  return Value(StripChars(v.ToString(), chars, true, true));
}

Value FLength(Interpreter&, const Value& v, const CallArgs&) { return Value(Length(v)); }
Value FString(Interpreter&, const Value& v, const CallArgs&) { return Value(v.ToString()); }
Value FUpper(Interpreter&, const Value& v, const CallArgs&) { return Value(AsciiMap(v.ToString(), [](int c) { return std::toupper(c); })); }
Value FLower(Interpreter&, const Value& v, const CallArgs&) { return Value(AsciiMap(v.ToString(), [](int c) { return std::tolower(c); })); }
Value FCapitalize(Interpreter&, const Value& v, const CallArgs&) { return Value(Capitalize(v.ToString())); }
Value FSafe(Interpreter&, const Value& v, const CallArgs&) { return Value::Markup(v.ToString()); }
Value FEscape(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_markup() ? v : Value::Markup(HtmlEscape(v.ToString()));
}
Value FForceEscape(Interpreter&, const Value& v, const CallArgs&) { return Value::Markup(HtmlEscape(v.ToString())); }

Value FTitle(Interpreter&, const Value& v, const CallArgs&) {
  // jinja2: words start after runs of '-', whitespace, '(', '{', '[', '<'.
  std::string s = v.ToString(), out;
  bool start = true;
  for (char c : s) {
    bool sep = c == '-' || std::isspace(static_cast<unsigned char>(c)) || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      out += c;
      start = true;
    } else {
      out += static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
      start = false;
    }
  }
  return Value(std::move(out));
}

Value FReplace(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* from = Arg(a, 0, "old");
  const Value* to = Arg(a, 1, "new");
  if (!from || !to) Fail("replace needs old and new");
  const Value* count = Arg(a, 2, "count");
  return Value(ReplaceAll(v.ToString(), from->ToString(), to->ToString(),
                          count && !count->is_none() ? count->as_int() : -1));
}

Value FFirst(Interpreter&, const Value& v, const CallArgs&) {
  ValueList items = Iterate(v);
  return items.empty() ? Value::Undefined("No first item, sequence was empty.") : items.front();
}

Value FLast(Interpreter&, const Value& v, const CallArgs&) {
  ValueList items = Iterate(v);
  return items.empty() ? Value::Undefined("No last item, sequence was empty.") : items.back();
}

Value FJoin(Interpreter& in, const Value& v, const CallArgs& a) {
  const Value* sep = Arg(a, 0, "d");
  const Value* attr = Arg(a, 1, "attribute");
  std::string out, d = sep ? sep->ToString() : "";
  bool first = true;
  for (const auto& item : Iterate(v)) {
    if (!first) out += d;
    first = false;
    out += (attr ? AttrPath(in, item, attr->ToString()) : item).ToString();
  }
  return Value(std::move(out));
}

Value FDefault(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* dflt = Arg(a, 0, "default_value");
  bool boolean = ArgBool(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.Truthy())) return dflt ? *dflt : Value("");
  return v;
}

Value FItems(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::List();
  if (!v.is_mapping()) Fail(fmt::format("items filter: can only get item pairs from a mapping, not {}", v.TypeName()));
  ValueList out;
  for (const auto& [k, val] : v.dict().entries) out.push_back(Value::Tuple({k, val}));
  return Value::List(std::move(out));
}

Value FList(Interpreter&, const Value& v, const CallArgs&) { return Value::List(Iterate(v)); }

Value FMap(Interpreter& in, const Value& v, const CallArgs& a) {
  ValueList out;
  if (!v.Truthy()) return Value::Generator({});  // jinja2 guards with `if value:`
  if (const Value* attr = Arg(a, SIZE_MAX, "attribute")) {
    const Value* dflt = Arg(a, SIZE_MAX, "default");
    for (const auto& item : Iterate(v)) {
      Value r = AttrPath(in, item, attr->ToString());
      out.push_back(r.is_undefined() && dflt ? *dflt : r);
    }
    return Value::Generator(std::move(out));
  }
  if (a.positional.empty()) return Value::Generator(Iterate(v));
  std::string filter = a.positional[0].ToString();
  CallArgs rest = Shift(a, 1);
  for (const auto& item : Iterate(v)) out.push_back(in.ApplyFilter(filter, item, rest));
  return Value::Generator(std::move(out));
}

Value FSelect(Interpreter& in, const Value& v, const CallArgs& a) { return Select(in, v, a, false, true); }
Value FReject(Interpreter& in, const Value& v, const CallArgs& a) { return Select(in, v, a, false, false); }
Value FSelectAttr(Interpreter& in, const Value& v, const CallArgs& a) { return Select(in, v, a, true, true); }
Value FRejectAttr(Interpreter& in, const Value& v, const CallArgs& a) { return Select(in, v, a, true, false); }

Value FInt(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* dflt = Arg(a, 0, "default");
  int64_t base = a.Get(1, "base") ? a.Get(1, "base")->as_int() : 10;
  Value fallback = dflt ? *dflt : Value(int64_t{0});
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return std::isfinite(v.as_double()) ? Value(static_cast<int64_t>(v.as_double())) : fallback;
  if (!v.is_string()) return fallback;
  std::string s = StripChars(v.str(), nullptr, true, true);
  if (s.empty()) return fallback;
  char* end = nullptr;
  errno = 0;
  long long r = std::strtoll(s.c_str(), &end, static_cast<int>(base));
  if (errno == 0 && end && *end == '\0') return Value(static_cast<int64_t>(r));
  double d = std::strtod(s.c_str(), &end);
  if (end && *end == '\0' && std::isfinite(d)) return Value(static_cast<int64_t>(d));
  return fallback;
}

Value FFloat(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* dflt = Arg(a, 0, "default");
  Value fallback = dflt ? *dflt : Value(0.0);
  if (v.is_number()) return Value(v.as_double());
  if (!v.is_string()) return fallback;
  std::string s = StripChars(v.str(), nullptr, true, true);
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (s.empty() || !end || *end != '\0') return fallback;
  return Value(d);
}

Value FAbs(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_number()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  Fail(fmt::format("bad operand type for abs(): '{}'", v.TypeName()));
}

Value FRound(Interpreter&, const Value& v, const CallArgs& a) {
  if (!v.is_number()) Fail(fmt::format("type {} doesn't define __round__ method", v.TypeName()));
  int64_t precision = a.Get(0, "precision") ? a.Get(0, "precision")->as_int() : 0;
  std::string method = a.Get(1, "method") ? a.Get(1, "method")->ToString() : "common";
  double x = v.as_double();
  if (method == "common") return Value(std::strtod(PyRound(x, precision, method).c_str(), nullptr));
  if (method != "ceil" && method != "floor") Fail("method must be common, ceil or floor");
  double scale = std::pow(10.0, static_cast<double>(precision));
  return Value((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
}

Value FIndent(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* width = Arg(a, 0, "width");
  std::string ind = !width ? "    " : width->is_string() ? width->str() : std::string(static_cast<size_t>(std::max<int64_t>(0, width->as_int())), ' ');
  bool first = ArgBool(a, 1, "first", false);
  bool blank = ArgBool(a, 2, "blank", false);
  std::string s = v.ToString() + "\n";
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < s.size();) {
    size_t nl = s.find('\n', pos);
    lines.push_back(s.substr(pos, nl - pos));
    pos = nl + 1;
  }
  std::string rv;
  rv = lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    rv += '\n';
    if (blank || !lines[i].empty()) rv += ind;
    rv += lines[i];
  }
  return Value(first ? ind + rv : rv);
}

Value FUnique(Interpreter& in, const Value& v, const CallArgs& a) {
  bool cs = ArgBool(a, 0, "case_sensitive", false);
  const Value* attr = Arg(a, 1, "attribute");
  ValueList out, seen;
  for (const auto& item : Iterate(v)) {
    Value key = SortKey(attr ? AttrPath(in, item, attr->ToString()) : item, cs);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return s.Equals(key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::List(std::move(out));
}

Value FSort(Interpreter& in, const Value& v, const CallArgs& a) {
  bool reverse = ArgBool(a, 0, "reverse", false);
  bool cs = ArgBool(a, 1, "case_sensitive", false);
  const Value* attr = Arg(a, 2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& item : Iterate(v)) keyed.emplace_back(SortKey(attr ? AttrPath(in, item, attr->ToString()) : item, cs), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? Value::Less(y.first, x.first) : Value::Less(x.first, y.first);
  });
  ValueList out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::List(std::move(out));
}

Value FDictsort(Interpreter&, const Value& v, const CallArgs& a) {
  if (!v.is_mapping()) Fail("dictsort expects a mapping");
  bool cs = ArgBool(a, 0, "case_sensitive", false);
  std::string by = a.Get(1, "by") ? a.Get(1, "by")->ToString() : "key";
  bool reverse = ArgBool(a, 2, "reverse", false);
  size_t pos = by == "value" ? 1 : 0;
  ValueList items;
  for (const auto& [k, val] : v.dict().entries) items.push_back(Value::Tuple({k, val}));
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = SortKey(x.list()[pos], cs), ky = SortKey(y.list()[pos], cs);
    return reverse ? Value::Less(ky, kx) : Value::Less(kx, ky);
  });
  return Value::List(std::move(items));
}

Value FBatch(Interpreter&, const Value& v, const CallArgs& a) {
  int64_t n = a.Get(0, "linecount") ? a.Get(0, "linecount")->as_int() : 0;
  if (n <= 0) Fail("batch size must be positive");
  const Value* fill = Arg(a, 1, "fill_with");
  ValueList out, cur;
  for (const auto& item : Iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::List(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none()) while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    out.push_back(Value::List(std::move(cur)));
  }
  return Value::List(std::move(out));
}

Value FWordcount(Interpreter&, const Value& v, const CallArgs&) {
  std::string s = v.ToString();
  int64_t n = 0;
  bool in_word = false;
  for (unsigned char c : s) {
    bool w = std::isalnum(c) || c == '_' || c >= 0x80;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value FCenter(Interpreter&, const Value& v, const CallArgs& a) {
  std::string s = v.ToString();
  int64_t width = a.Get(0, "width") ? a.Get(0, "width")->as_int() : 80;
  int64_t len = static_cast<int64_t>(CodepointCount(s));
  if (width <= len) return Value(s);
  int64_t total = width - len;
  int64_t left = total / 2 + (total & width & 1);  // CPython's str.center split
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
}

Value FReverse(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_string()) {
    auto chars = SplitCodepoints(v.str());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value(std::move(out));
  }
  ValueList items = Iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

Value FSum(Interpreter& in, const Value& v, const CallArgs& a) {
  const Value* attr = Arg(a, 0, "attribute");
  Value total = a.Get(1, "start") ? *a.Get(1, "start") : Value(int64_t{0});
  for (const auto& item : Iterate(v)) total = BinaryOp("+", total, attr ? AttrPath(in, item, attr->ToString()) : item);
  return total;
}

Value MinMax(Interpreter& in, const Value& v, const CallArgs& a, bool want_max) {
  bool cs = ArgBool(a, 0, "case_sensitive", false);
  const Value* attr = Arg(a, 1, "attribute");
  ValueList items = Iterate(v);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    Value ki = SortKey(attr ? AttrPath(in, items[i], attr->ToString()) : items[i], cs);
    Value kb = SortKey(attr ? AttrPath(in, items[best], attr->ToString()) : items[best], cs);
    if (want_max ? Value::Less(kb, ki) : Value::Less(ki, kb)) best = i;
  }
  return items[best];
}
Value FMin(Interpreter& in, const Value& v, const CallArgs& a) { return MinMax(in, v, a, false); }
Value FMax(Interpreter& in, const Value& v, const CallArgs& a) { return MinMax(in, v, a, true); }

Value FAttr(Interpreter& in, const Value& v, const CallArgs& a) {
  const Value* name = Arg(a, 0, "name");
  if (!name) Fail("attr filter needs a name");
  return in.GetAttr(v, name->ToString());
}

Value FFormat(Interpreter&, const Value& v, const CallArgs& a) {
  return BinaryOp("%", Value(v.ToString()), a.positional.size() == 1 ? a.positional[0] : Value::Tuple(a.positional));
}

Value FPprint(Interpreter&, const Value& v, const CallArgs&) { return Value(v.Repr()); }

const std::unordered_map<std::string, FilterFn>& Filters() {
  static const std::unordered_map<std::string, FilterFn> kFilters = {
      {"tojson", FTojson}, {"trim", FTrim}, {"length", FLength}, {"count", FLength},
      {"string", FString}, {"upper", FUpper}, {"lower", FLower}, {"title", FTitle},
      {"capitalize", FCapitalize}, {"replace", FReplace}, {"first", FFirst}, {"last", FLast},
      {"join", FJoin}, {"default", FDefault}, {"d", FDefault}, {"items", FItems}, {"list", FList},
      {"map", FMap}, {"select", FSelect}, {"reject", FReject}, {"selectattr", FSelectAttr},
      {"rejectattr", FRejectAttr}, {"safe", FSafe}, {"escape", FEscape}, {"e", FEscape},
      {"forceescape", FForceEscape}, {"int", FInt}, {"float", FFloat}, {"abs", FAbs}, {"round", FRound},
      {"indent", FIndent}, {"unique", FUnique}, {"sort", FSort}, {"dictsort", FDictsort},
      {"batch", FBatch}, {"wordcount", FWordcount}, {"center", FCenter}, {"reverse", FReverse},
      {"sum", FSum}, {"min", FMin}, {"max", FMax}, {"attr", FAttr}, {"format", FFormat},
      {"pprint", FPprint},
  };
  return kFilters;
}

// ---- tests ----

bool TDefined(Interpreter&, const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool TUndefined(Interpreter&, const Value& v, const CallArgs&) { return v.is_undefined(); }
bool TNone(Interpreter&, const Value& v, const CallArgs&) { return v.is_none(); }
bool TString(Interpreter&, const Value& v, const CallArgs&) { return v.is_string(); }
bool TMapping(Interpreter&, const Value& v, const CallArgs&) { return v.is_dict(); }
bool TSequence(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_string() || (v.is_sequence_like() && !v.is_generator()) || v.is_dict();
}
bool TIterable(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_sequence_like() || v.is_dict();
}
bool TNumber(Interpreter&, const Value& v, const CallArgs&) { return v.is_number(); }
bool TInteger(Interpreter&, const Value& v, const CallArgs&) { return v.is_int(); }
bool TFloat(Interpreter&, const Value& v, const CallArgs&) { return v.is_float(); }
bool TBoolean(Interpreter&, const Value& v, const CallArgs&) { return v.is_bool(); }
bool TTrue(Interpreter&, const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); }
bool TFalse(Interpreter&, const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool TCallable(Interpreter&, const Value& v, const CallArgs&) { return v.is_callable(); }
const Value& Other(const CallArgs& a) {
  const Value* o = a.Get(0, "other");
  if (!o) Fail("test needs an argument to compare with");
  return *o;
}
bool TEq(Interpreter&, const Value& v, const CallArgs& a) { return v.Equals(Other(a)); }
bool TNe(Interpreter&, const Value& v, const CallArgs& a) { return !v.Equals(Other(a)); }
bool TLt(Interpreter&, const Value& v, const CallArgs& a) { return Value::Less(v, Other(a)); }
bool TLe(Interpreter&, const Value& v, const CallArgs& a) { return !Value::Less(Other(a), v); }
bool TGt(Interpreter&, const Value& v, const CallArgs& a) { return Value::Less(Other(a), v); }
bool TGe(Interpreter&, const Value& v, const CallArgs& a) { return !Value::Less(v, Other(a)); }
bool TIn(Interpreter&, const Value& v, const CallArgs& a) { return Contains(Other(a), v); }
bool TSameAs(Interpreter&, const Value& v, const CallArgs& a) {
  const Value& o = Other(a);
  if (v.is_sequence_like() && o.is_sequence_like()) return &v.list() == &o.list();
  if (v.is_mapping() && o.is_mapping()) return &v.dict() == &o.dict();
  return v.kind() == o.kind() && (v.is_none() || v.is_undefined() || (v.is_bool() && v.as_bool() == o.as_bool()));
}
int64_t IntOf(const Value& v) {
  if (!v.is_int() && !v.is_bool()) Fail(fmt::format("expected an integer, got {}", v.TypeName()));
  return v.as_int();
}
bool TOdd(Interpreter&, const Value& v, const CallArgs&) { return IntOf(v) % 2 != 0; }
bool TEven(Interpreter&, const Value& v, const CallArgs&) { return IntOf(v) % 2 == 0; }
bool TDivisibleBy(Interpreter&, const Value& v, const CallArgs& a) {
  int64_t d = IntOf(Other(a));
  if (d == 0) Fail("integer division or modulo by zero");
  return IntOf(v) % d == 0;
}
bool TLower(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_string() && AsciiMap(v.str(), [](int c) { return std::tolower(c); }) == v.str();
}
bool TUpper(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_string() && AsciiMap(v.str(), [](int c) { return std::toupper(c); }) == v.str();
}
bool TEscaped(Interpreter&, const Value&, const CallArgs&) { return false; }
bool TFilter(Interpreter&, const Value& v, const CallArgs&) { return v.is_string() && HasFilter(v.str()); }

const std::unordered_map<std::string, TestFn>& Tests() {
  static const std::unordered_map<std::string, TestFn> kTests = {
      {"defined", TDefined}, {"undefined", TUndefined}, {"none", TNone}, {"string", TString},
      {"mapping", TMapping}, {"sequence", TSequence}, {"iterable", TIterable}, {"number", TNumber},
      {"integer", TInteger}, {"float", TFloat}, {"boolean", TBoolean}, {"true", TTrue},
      {"false", TFalse}, {"callable", TCallable}, {"equalto", TEq}, {"eq", TEq}, {"==", TEq},
      {"sameas", TSameAs}, {"ne", TNe}, {"!=", TNe}, {"lt", TLt}, {"<", TLt}, {"lessthan", TLt},
      {"le", TLe}, {"<=", TLe}, {"gt", TGt}, {">", TGt}, {"greaterthan", TGt}, {"ge", TGe},
      {">=", TGe}, {"in", TIn}, {"odd", TOdd}, {"even", TEven}, {"divisibleby", TDivisibleBy},
      {"lower", TLower}, {"upper", TUpper}, {"escaped", TEscaped}, {"filter", TFilter},
  };
  return kTests;
}

}  // namespace

bool HasFilter(const std::string& name) { return Filters().count(name) != 0; }
bool HasTest(const std::string& name) { return Tests().count(name) != 0; }

Value CallFilter(Interpreter& in, const std::string& name, const Value& operand, const CallArgs& args) {
  auto it = Filters().find(name);
  if (it == Filters().end()) Fail(fmt::format("no filter named '{}'", name));
  return it->second(in, operand, args);
}

bool CallTest(Interpreter& in, const std::string& name, const Value& operand, const CallArgs& args) {
  auto it = Tests().find(name);
  if (it == Tests().end()) Fail(fmt::format("no test named '{}'", name));
  return it->second(in, operand, args);
}

}  // namespace pg::jinja
