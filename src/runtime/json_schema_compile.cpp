// JsonSchema::Compile: a JSON schema (nlohmann::ordered_json, so properties keep the order the
// client wrote) to JsonSchema's node graph. What cannot be enforced is refused with the keyword
// and its JSON pointer; nothing that constrains an instance is silently dropped.
#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"
#include "runtime/json_schema.h"

namespace pg::runtime {

using ojson = nlohmann::ordered_json;
using Node = JsonSchema::Node;
using Kind = JsonSchema::Kind;

namespace {

// Keywords that constrain instances in ways the matcher does not enforce.
constexpr std::string_view kUnsupported[] = {
    "patternProperties", "multipleOf", "not", "if", "then", "else", "prefixItems", "contains", "minContains",
    "maxContains", "uniqueItems", "propertyNames", "minProperties", "maxProperties",
    "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties",
    "unevaluatedItems", "additionalItems", "$dynamicRef", "$recursiveRef"};
// Keywords that do constrain (and are supported): a $ref / anyOf / allOf beside them is refused.
constexpr std::string_view kAssertions[] = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems",
    "maxItems", "minLength", "maxLength", "pattern", "anyOf", "oneOf", "allOf", "$ref"};
constexpr size_t kMaxLiteralBytes = 255;  // SchemaMatcher's byte counter in a literal
constexpr int kMaxSchemaDepth = 64;

bool TypeMatches(const ojson& v, std::string_view type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "number") return v.is_number();
  if (type == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>())));
  return false;
}

}  // namespace

class SchemaCompiler {
 public:
  SchemaCompiler() {
    // JsonSchema's fixed nodes: any value and its parts.
    Add({.kind = Kind::kAny});
    Add({.kind = Kind::kMap, .child = JsonSchema::kAnyNode});
    Add({.kind = Kind::kArray, .child = JsonSchema::kAnyNode});
    Add({.kind = Kind::kString});
    Add({.kind = Kind::kNumber});
    Add({.kind = Kind::kLiteral, .lits = {"false", "null", "true"}});
  }

  // Compiles one document (its $refs resolve inside it) into the graph; returns its root node.
  int32_t Document(const ojson& doc) {
    root_ = &doc;
    refs_.clear();
    return Compile(doc, "", 0);
  }

  int32_t ToolCall(const std::vector<std::pair<std::string, ojson>>& tools, const std::string& args_key,
                   std::vector<std::string>* relaxed) {
    PG_ENSURE(!tools.empty(), kInvalidArgument, "a tool call needs at least one tool");
    Node names{.kind = Kind::kLiteral};
    for (const auto& [name, params] : tools) names.lits.push_back(ojson(name).dump());
    std::sort(names.lits.begin(), names.lits.end());
    PG_ENSURE(std::adjacent_find(names.lits.begin(), names.lits.end()) == names.lits.end(), kInvalidArgument,
              "two tools share a name");
    Node call{.kind = Kind::kObject, .lits = {ojson("name").dump(), ojson(args_key).dump()}};
    call.lit_prop = {0, 1};
    if (call.lits[1] < call.lits[0]) std::swap(call.lits[0], call.lits[1]), std::swap(call.lit_prop[0], call.lit_prop[1]);
    call.next_required = {0, 1, 2};
    call.tag_node.assign(tools.size(), JsonSchema::kAnyMap);
    for (const auto& [name, params] : tools) {
      const size_t i = size_t(std::lower_bound(names.lits.begin(), names.lits.end(), ojson(name).dump()) - names.lits.begin());
      if (params.is_null()) continue;
      try {
        call.tag_node[i] = Document(params);
      } catch (const Error& e) {
        if (relaxed) relaxed->push_back(name + ": " + e.what());
      }
    }
    call.prop_node = {Add(std::move(names)), JsonSchema::kAnyMap};  // [1]: tag_node's, by name
    return Add(std::move(call));
  }

  std::shared_ptr<const JsonSchema> Finish(int32_t root) {
    out_.root_ = root;
    return std::make_shared<const JsonSchema>(std::move(out_));
  }

 private:
  template <typename... Args>
  [[noreturn]] static void Fail(const std::string& path, fmt::format_string<Args...> f, Args&&... args) {
    Throw(ErrorCode::kInvalidArgument, "json_schema at '{}': {}", path.empty() ? "#" : "#" + path,
          fmt::format(f, std::forward<Args>(args)...));
  }

  int32_t Add(Node n) {
    PG_ENSURE(out_.nodes_.size() < 0xFFFF, kInvalidArgument, "json_schema: more than 65535 nodes");
    out_.nodes_.push_back(std::move(n));
    return int32_t(out_.nodes_.size() - 1);
  }

  static bool HasAssertionBesides(const ojson& s, std::string_view keyword) {
    for (std::string_view k : kAssertions)
      if (k != keyword && s.contains(std::string(k))) return true;
    return false;
  }

  static uint32_t Count(const ojson& s, const char* key, uint32_t dflt, const std::string& path) {
    auto it = s.find(key);
    if (it == s.end()) return dflt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      Fail(path, "'{}' must be a non-negative integer", key);
    return uint32_t(std::min<int64_t>(it->get<int64_t>(), int64_t(JsonSchema::kUnbounded) - 1));
  }

  int32_t Compile(const ojson& s, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) Fail(path, "nested deeper than {} levels", kMaxSchemaDepth);
    if (s.is_boolean()) {
      if (!s.get<bool>()) Fail(path, "the schema 'false' allows no value");
      return JsonSchema::kAnyNode;
    }
    if (!s.is_object()) Fail(path, "a schema must be an object or a boolean");
    for (std::string_view k : kUnsupported)
      if (s.contains(std::string(k))) Fail(path, "'{}' is not supported", k);
    if (auto it = s.find("$ref"); it != s.end()) {
      if (HasAssertionBesides(s, "$ref")) Fail(path, "'$ref' beside other constraints is not supported");
      if (!it->is_string()) Fail(path, "'$ref' must be a string");
      return Ref(it->get<std::string>(), path, depth);
    }
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1 || HasAssertionBesides(s, "allOf"))
        Fail(path, "'allOf' is supported with exactly one schema and nothing beside it");
      return Compile((*it)[0], path + "/allOf/0", depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      auto it = s.find(key);
      if (it == s.end()) continue;
      if (s.contains("anyOf") && s.contains("oneOf")) Fail(path, "both 'anyOf' and 'oneOf'");
      if (!it->is_array() || it->empty()) Fail(path, "'{}' must be a non-empty array", key);
      if (HasAssertionBesides(s, key)) Fail(path, "'{}' beside other constraints is not supported", key);
      Node n{.kind = Kind::kAnyOf};
      for (size_t i = 0; i < it->size(); ++i)
        n.alts.push_back(Compile((*it)[i], fmt::format("{}/{}/{}", path, key, i), depth + 1));
      return n.alts.size() == 1 ? n.alts[0] : Add(std::move(n));
    }
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) types.push_back(it->get<std::string>());
      else if (it->is_array() && !it->empty())
        for (const auto& t : *it) {
          if (!t.is_string()) Fail(path, "'type' must be a string or an array of strings");
          types.push_back(t.get<std::string>());
        }
      else Fail(path, "'type' must be a string or an array of strings");
    }
    if (s.contains("enum") || s.contains("const")) return Literal(s, types, path);
    if (types.empty()) {  // inferred from the keywords present, else any value
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
        types.push_back("object");
      else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) types.push_back("array");
      else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) types.push_back("string");
      else return JsonSchema::kAnyNode;
    }
    Node any{.kind = Kind::kAnyOf};
    for (const std::string& t : types) {
      const int32_t id = Typed(s, t, path, depth);
      if (std::find(any.alts.begin(), any.alts.end(), id) == any.alts.end()) any.alts.push_back(id);
    }
    return any.alts.size() == 1 ? any.alts[0] : Add(std::move(any));
  }

  int32_t Literal(const ojson& s, const std::vector<std::string>& types, const std::string& path) {
    std::vector<const ojson*> values;
    if (auto it = s.find("const"); it != s.end()) values.push_back(&*it);
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) Fail(path, "'enum' must be a non-empty array");
      if (s.contains("const")) Fail(path, "both 'enum' and 'const'");
      for (const auto& v : *it) values.push_back(&v);
    }
    // Every keyword beside enum / const applies too: type, string lengths and number bounds
    // filter the values; the structural ones are refused rather than left unchecked.
    for (const char* k : {"properties", "required", "additionalProperties", "items", "minItems", "maxItems"})
      if (s.contains(k)) Fail(path, "'{}' beside 'enum' / 'const' is not supported", k);
    const NumberBounds bounds = ReadBounds(s, path);
    const auto pattern = Pattern(s, path);
    auto in_bounds = [&](const ojson& v) {
      if (v.is_string()) {
        const std::string& text = v.get_ref<const std::string&>();
        const size_t cps = CodePoints(text);
        return cps >= Count(s, "minLength", 0, path) && cps <= Count(s, "maxLength", JsonSchema::kUnbounded, path) &&
               (pattern == nullptr || pattern->FullMatch(text));
      }
      return !v.is_number() || bounds.Contains(v.get<double>());
    };
    Node n{.kind = Kind::kLiteral};
    for (const ojson* v : values) {
      const bool typed = types.empty() || std::any_of(types.begin(), types.end(),
                                                      [&](const std::string& t) { return TypeMatches(*v, t); });
      if (!typed || !in_bounds(*v)) continue;  // every keyword applies: such a value is no instance
      std::string text = v->dump();
      if (text.size() > kMaxLiteralBytes) Fail(path, "an enum / const value longer than {} bytes", kMaxLiteralBytes);
      n.lits.push_back(std::move(text));
    }
    if (n.lits.empty()) Fail(path, "no 'enum' / 'const' value satisfies the schema's other keywords");
    std::sort(n.lits.begin(), n.lits.end());
    n.lits.erase(std::unique(n.lits.begin(), n.lits.end()), n.lits.end());
    return Add(std::move(n));
  }

  int32_t Typed(const ojson& s, const std::string& type, const std::string& path, int depth) {
    if (type == "object") return Object(s, path, depth);
    if (type == "array") {
      Node n{.kind = Kind::kArray, .min = Count(s, "minItems", 0, path),
             .max = Count(s, "maxItems", JsonSchema::kUnbounded, path), .child = JsonSchema::kAnyNode};
      if (n.min > n.max) Fail(path, "minItems > maxItems allows no array");
      if (auto it = s.find("items"); it != s.end()) {
        if (it->is_array()) Fail(path, "'items' as an array (tuples) is not supported");
        n.child = Compile(*it, path + "/items", depth + 1);
      }
      return Add(std::move(n));
    }
    if (type == "string") {
      Node n{.kind = Kind::kString, .min = Count(s, "minLength", 0, path),
             .max = Count(s, "maxLength", JsonSchema::kUnbounded, path), .pattern = Pattern(s, path)};
      if (n.min > n.max) Fail(path, "minLength > maxLength allows no string");
      if (n.min == 0 && n.max == JsonSchema::kUnbounded && !n.pattern) return JsonSchema::kAnyString;
      return Add(std::move(n));
    }
    if (type == "number" || type == "integer") return Number(s, type == "integer", path);
    if (type == "boolean") return Add({.kind = Kind::kLiteral, .lits = {"false", "true"}});
    if (type == "null") return Add({.kind = Kind::kLiteral, .lits = {"null"}});
    Fail(path, "unknown type '{}'", type);
  }

  // `pattern`, compiled to match anywhere in a string (JSON Schema's, ECMAScript's search);
  // null without one.
  static std::shared_ptr<const Regex> Pattern(const ojson& s, const std::string& path) {
    auto it = s.find("pattern");
    if (it == s.end()) return nullptr;
    if (!it->is_string()) Fail(path, "'pattern' must be a string");
    try {
      return Regex::Compile(it->get<std::string>(), Regex::Anchoring::kSearch);
    } catch (const Error& e) {
      Fail(path, "'pattern': {}", e.what());
    }
  }

  // minimum / maximum / exclusiveMinimum / exclusiveMaximum (numbers; draft 4's boolean
  // exclusive* make minimum / maximum exclusive), as one interval.
  struct NumberBounds {
    bool any = false;
    double lo = -HUGE_VAL, hi = HUGE_VAL;
    bool lo_open = false, hi_open = false;
    bool Contains(double x) const { return (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi); }
  };
  static NumberBounds ReadBounds(const ojson& s, const std::string& path) {
    NumberBounds b;
    auto read = [&](const char* key, bool upper, bool open) {
      auto it = s.find(key);
      if (it == s.end() || it->is_boolean()) return;
      if (!it->is_number()) Fail(path, "'{}' must be a number", key);
      open = open || s.value(upper ? "exclusiveMaximum" : "exclusiveMinimum", ojson(false)) == ojson(true);
      const double v = it->get<double>();
      b.any = true;
      if (upper && (v < b.hi || (v == b.hi && open))) b.hi = v, b.hi_open = open;
      if (!upper && (v > b.lo || (v == b.lo && open))) b.lo = v, b.lo_open = open;
    };
    read("minimum", false, false);
    read("maximum", true, false);
    read("exclusiveMinimum", false, true);
    read("exclusiveMaximum", true, true);
    return b;
  }

  // Bounds are enforced on integers only (the range of a digit prefix is an interval per
  // length); a number with bounds is refused.
  int32_t Number(const ojson& s, bool integer, const std::string& path) {
    const NumberBounds b = ReadBounds(s, path);
    if (!b.any) return integer ? Add({.kind = Kind::kNumber, .integer = true}) : JsonSchema::kAnyNumber;
    if (!integer) Fail(path, "'minimum' / 'maximum' on a number (not an integer) is not supported");
    // The integers inside the interval, clamped to int64.
    double lo = std::ceil(b.lo), hi = std::floor(b.hi);
    if (b.lo_open && lo == b.lo) lo += 1;
    if (b.hi_open && hi == b.hi) hi -= 1;
    Node n{.kind = Kind::kNumber, .integer = true, .bounded = true,
           .lo = int64_t(std::clamp(lo, -9.2e18, 9.2e18)), .hi = int64_t(std::clamp(hi, -9.2e18, 9.2e18))};
    if (n.lo > n.hi) Fail(path, "no integer lies within the bounds");
    return Add(std::move(n));
  }

  int32_t Object(const ojson& s, const std::string& path, int depth) {
    const ojson empty = ojson::object();
    auto pit = s.find("properties");
    if (pit != s.end() && !pit->is_object()) Fail(path, "'properties' must be an object");
    const ojson& props = pit != s.end() ? *pit : empty;
    std::vector<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) Fail(path, "'required' must be an array of strings");
      for (const auto& r : *it) {
        if (!r.is_string()) Fail(path, "'required' must be an array of strings");
        if (!props.contains(r.get<std::string>()))
          Fail(path, "required property '{}' is not in 'properties' (not supported)", r.get<std::string>());
        required.push_back(r.get<std::string>());
      }
    }
    if (props.empty()) {
      auto ap = s.find("additionalProperties");
      if (ap == s.end() || (ap->is_boolean() && ap->get<bool>())) return JsonSchema::kAnyMap;
      if (ap->is_boolean()) return Add({.kind = Kind::kObject, .next_required = {0}});  // {} only
      Node m{.kind = Kind::kMap};
      m.child = Compile(*ap, path + "/additionalProperties", depth + 1);
      return Add(std::move(m));
    }
    // Properties are written in the schema's order; extra ones never (always valid).
    Node n{.kind = Kind::kObject};
    const int32_t id = Add({});  // reserved: the children's ids come after it
    std::vector<uint8_t> req;
    for (const auto& [name, sub] : props.items()) {
      n.prop_node.push_back(Compile(sub, path + "/properties/" + name, depth + 1));
      req.push_back(std::find(required.begin(), required.end(), name) != required.end());
      std::string key = ojson(name).dump();
      if (key.size() > kMaxLiteralBytes) Fail(path, "a property name longer than {} bytes", kMaxLiteralBytes);
      n.lits.push_back(std::move(key));
    }
    std::vector<int32_t> order(n.lits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return n.lits[size_t(a)] < n.lits[size_t(b)]; });
    std::vector<std::string> sorted;
    for (int32_t i : order) sorted.push_back(n.lits[size_t(i)]), n.lit_prop.push_back(i);
    n.lits = std::move(sorted);
    n.next_required.assign(n.props() + 1, uint32_t(n.props()));
    for (size_t i = n.props(); i-- > 0;) n.next_required[i] = req[i] ? uint32_t(i) : n.next_required[i + 1];
    out_.nodes_[size_t(id)] = std::move(n);
    return id;
  }

  int32_t Ref(const std::string& ref, const std::string& path, int depth) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.empty() || ref[0] != '#') Fail(path, "'$ref' '{}': only references into this schema (#/...) are supported", ref);
    const ojson* target = nullptr;
    try {
      target = &root_->at(ojson::json_pointer(ref.substr(1)));
    } catch (const std::exception&) {
      Fail(path, "'$ref' '{}' points to nothing", ref);
    }
    const int32_t id = Add({});  // reserved: recursive references resolve to it
    refs_[ref] = id;
    const int32_t compiled = Compile(*target, ref.substr(1), depth + 1);
    out_.nodes_[size_t(id)] = compiled == id ? Node{} : out_.nodes_[size_t(compiled)];
    return id;
  }

  const ojson* root_ = nullptr;
  JsonSchema out_;
  std::map<std::string, int32_t> refs_;
};

std::shared_ptr<const JsonSchema> JsonSchema::Compile(const nlohmann::ordered_json& schema) {
  SchemaCompiler c;
  return c.Finish(c.Document(schema));
}

std::shared_ptr<const JsonSchema> JsonSchema::CompileToolCall(
    const std::vector<std::pair<std::string, nlohmann::ordered_json>>& tools, const std::string& args_key,
    std::vector<std::string>* relaxed) {
  SchemaCompiler c;
  return c.Finish(c.ToolCall(tools, args_key, relaxed));
}

}  // namespace pg::runtime
