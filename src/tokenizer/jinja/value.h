// Values of the Jinja interpreter: a small dynamic type with Python semantics (the semantics
// jinja2 inherits), built from and convertible to JSON.
//
// Invariants:
//  * Lists and dicts have reference semantics (shared_ptr), like Python objects: a namespace
//    attribute set inside a loop is seen after it.
//  * Dicts keep insertion order (Python 3.7+), which tojson and iteration rely on.
//  * Strings are UTF-8; length, indexing and slicing count code points.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pg::jinja {

class Value;
class Interpreter;
using ValueList = std::vector<Value>;

// Insertion-ordered map with Value keys (JSON gives string keys; templates may build others).
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  const Value* Find(const Value& key) const;
  Value* Find(const Value& key);
  void Set(const Value& key, Value value);
  // Reads a string key; nullptr when absent.
  const Value* Find(std::string_view key) const;
};

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Returns the argument at `index` or named `name`, or nullptr.
  const Value* Get(size_t index, std::string_view name) const;
};

using NativeFn = std::function<Value(const CallArgs&, Interpreter&)>;

struct Callable {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict,
                    kNamespace, kCallable };

  Value() = default;  // undefined
  static Value Undefined(std::string hint = {});
  static Value None();
  Value(bool b);
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double d);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value List(ValueList items = {});
  // What jinja2's map/select/reject/selectattr/rejectattr return: iterates like a list, but is
  // always true, has no len(), is not a sequence and is not JSON serialisable.
  static Value Generator(ValueList items);
  // markupsafe.Markup, what `safe`/`escape` return: `Markup + str` HTML-escapes the str side
  // (jinja2 does this even with autoescape off, and chat templates hit it).
  static Value Markup(std::string s);
  static Value Tuple(ValueList items);
  static Value MakeDict(Dict dict = {});
  static Value MakeNamespace(Dict dict = {});
  static Value Function(std::string name, NativeFn fn);
  static Value FromJson(const nlohmann::ordered_json& j);
  static Value FromJson(const nlohmann::json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence_like() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_mapping() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_generator() const { return generator_; }
  bool is_markup() const { return markup_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_double() const;  // int, bool or float
  const std::string& str() const { return *s_; }  // string, or the hint of an undefined
  ValueList& list() const { return *list_; }       // list or tuple
  Dict& dict() const { return *dict_; }            // dict or namespace
  const Callable& callable() const { return *fn_; }

  bool Truthy() const;
  // Appends `tail` in place when this is a plain string nobody else references (the
  // temporary of an earlier `+`); returns false (and does nothing) otherwise. Turns the
  // left-deep `a + b + c + ...` chains of chat templates from quadratic copying into appends.
  bool AppendIfUnique(const std::string& tail) {
    if (kind_ != Kind::kString || markup_ || s_.use_count() != 1) return false;
    *s_ += tail;
    return true;
  }
  // out += ToString(), without the temporary for strings.
  void AppendTo(std::string& out) const {
    if (kind_ == Kind::kString) out += *s_;
    else out += ToString();
  }
  // Python str(): what {{ value }} prints (undefined prints "").
  std::string ToString() const;
  // Python repr(): used inside containers ("['a', 1, None]").
  std::string Repr() const;
  // Python type name for error messages ("str", "int", "list", ...).
  std::string TypeName() const;
  // json.dumps(value, ensure_ascii, indent, separators, sort_keys) as Python prints it.
  struct JsonOptions {
    bool ensure_ascii = false;
    int indent = -1;  // < 0: single line
    std::string item_separator;  // empty: Python's default for the indent mode
    std::string key_separator;
    bool has_separators = false;
    bool sort_keys = false;
  };
  std::string ToJsonString(const JsonOptions& options) const;
  nlohmann::ordered_json ToJson() const;

  // Python == (1 == 1.0 is true; different kinds otherwise unequal).
  bool Equals(const Value& other) const;
  // Python <; throws pg::Error for unorderable kinds.
  static bool Less(const Value& a, const Value& b);

 private:
  Kind kind_ = Kind::kUndefined;
  bool generator_ = false;  // kList produced lazily by jinja2 (see Generator())
  bool markup_ = false;     // kString that is a Markup (see Markup())
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0.0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> fn_;
};

// Python float repr(): shortest round-trip digits ("1.0", "1e-07", "1e+22", "inf").
std::string FormatPythonFloat(double d);
// Python repr() of a str (quote choice and escapes as CPython does).
std::string PythonStringRepr(const std::string& s);
// Appends the JSON string literal of UTF-8 `s` the way Python's json.dumps writes it.
void AppendJsonString(std::string& out, const std::string& s, bool ensure_ascii);

// markupsafe.escape: & < > " ' -> &amp; &lt; &gt; &#34; &#39;
std::string HtmlEscape(const std::string& s);

// UTF-8 helpers; malformed bytes decode as U+FFFD-free raw bytes (each invalid byte a unit).
std::vector<std::string> SplitCodepoints(const std::string& s);
size_t CodepointCount(const std::string& s);

}  // namespace pg::jinja
