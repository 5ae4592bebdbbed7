// Structured outputs: the schema compiler's refusals, SchemaMatcher on hand-picked valid and
// invalid texts (where each must be refused, byte by byte), and seeded walks through the
// constraint whose every ended output must be an instance of its schema, judged by a small
// validator written here from the JSON Schema text (independent of the matcher's graph). The
// walks also check, at every step, the indexed mask against Allowed() token by token.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/json_constraint.h"
#include "runtime/json_schema.h"
#include "mask_checks.h"
#include "runtime/sampler.h"

namespace pg::runtime {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const JsonSchema> Schema(const char* text) { return JsonSchema::Compile(ojson::parse(text)); }

// Bytes of `text` the matcher accepts before the first refusal (text.size(): all of them).
size_t AcceptedPrefix(const JsonSchema& s, std::string_view text) {
  SchemaMatcher m(s);
  for (size_t i = 0; i < text.size(); ++i)
    if (!m.Accept(uint8_t(text[i]))) return i;
  return text.size();
}

bool Matches(const JsonSchema& s, std::string_view text) {
  SchemaMatcher m(s);
  return m.Accept(text) && m.can_end();
}

std::string CompileError(const char* text) {
  try {
    Schema(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(JsonSchemaCompile, RefusesWhatItCannotEnforceNamingTheKeywordAndPlace) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "string", "pattern": "(a)\\1"})", "'#': 'pattern': regex at position 3: backreferences"},
      {R"({"properties": {"s": {"pattern": 5}}})", "'#/properties/s': 'pattern' must be a string"},
      {R"({"properties": {"n": {"type": "integer", "multipleOf": 2}}})", "#/properties/n"},
      {R"({"type": "number", "maximum": 1.5})", "not an integer"},
      {R"({"type": "integer", "minimum": 3, "maximum": 2})", "no integer"},
      {R"({"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 3})", "no integer"},
      {R"({"type": "array", "items": [{"type": "string"}]})", "tuples"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "'b'"},
      {R"(false)", "allows no value"},
      {R"({"$ref": "http://example.com/s.json"})", "only references into this schema"},
      {R"({"$ref": "#/$defs/missing"})", "points to nothing"},
      {R"({"enum": []})", "non-empty"},
      {R"({"type": "integer", "enum": ["a", "b"]})", "no 'enum' / 'const' value"},
      {R"({"enum": [1, 2], "minimum": 3})", "no 'enum' / 'const' value"},
      {R"({"enum": [{"a": 1}], "required": ["a"]})", "'required' beside 'enum'"},
      {R"({"type": "array", "minItems": 3, "maxItems": 2})", "minItems > maxItems"},
      {R"({"type": "string", "anyOf": [{"maxLength": 2}]})", "'anyOf' beside"},
      {R"({"allOf": [{"type": "string"}, {"maxLength": 2}]})", "'allOf'"},
      {R"({"type": "date"})", "unknown type 'date'"},
      {R"({"type": "string", "minLength": -1})", "non-negative"},
  };
  for (const auto& [schema, want] : cases) {
    SCOPED_TRACE(schema);
    const std::string err = CompileError(schema);
    EXPECT_NE(err.find(want), std::string::npos) << err;
  }
  // Annotations, `format` included (an annotation in 2020-12), compile.
  EXPECT_NO_THROW(Schema(R"({"title": "T", "description": "d", "type": "string", "format": "date-time",
                             "default": "x", "examples": ["y"], "$schema": "https://json-schema.org/draft/2020-12/schema"})"));
}

TEST(SchemaMatcher, ObjectPropertiesInOrderRequiredAndOptional) {
  auto s = Schema(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                      "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name"]})");
  for (const char* ok : {R"({"name": "a"})", R"({"name":"a","age":3})", R"({"name":"a","tags":[]})",
                         R"({"name": "b", "age": -7, "tags": ["x", "y"]})", "{ \"name\" : \"a\" ,\n \"age\": 0 }"}) {
    EXPECT_TRUE(Matches(*s, ok)) << ok;
  }
  const std::pair<const char*, size_t> bad[] = {
      {R"({"age":3})", 2},               // "a..." names age before the required name
      {R"({})", 1},                      // name is required
      {R"({"name":"a","age":1.5})", 19}, // an integer
      {R"({"name":"a","name":"b"})", 13},// written once, in order
      {R"({"name":"a","age":3,"tags":[],"x":1})", 29},  // every property written: no ','
      {R"({"name":"a",})", 12},
      {R"({"nam":"a"})", 5},
      {R"({"name":"a","tags":["x",1]})", 24},
  };
  for (const auto& [text, at] : bad) EXPECT_EQ(AcceptedPrefix(*s, text), at) << text;
  EXPECT_FALSE(Matches(*s, R"({"name":"a")"));  // open: no EOS yet
}

TEST(SchemaMatcher, EnumsConstsAndLiteralsThatMayGoOn) {
  auto colors = Schema(R"({"enum": ["red", "green", 1, 12, null]})");
  for (const char* ok : {R"("red")", R"("green")", "1", "12", "null"}) EXPECT_TRUE(Matches(*colors, ok)) << ok;
  EXPECT_EQ(AcceptedPrefix(*colors, R"("blue")"), 1u);
  EXPECT_EQ(AcceptedPrefix(*colors, "13"), 1u);
  EXPECT_EQ(AcceptedPrefix(*colors, "12 "), 2u);  // nothing after the top-level value
  auto obj = Schema(R"({"type": "object", "properties": {"n": {"enum": [1, 12]}, "m": {"const": {"k": [true]}}},
                        "required": ["n", "m"]})");
  EXPECT_TRUE(Matches(*obj, R"({"n": 1, "m": {"k":[true]}})"));
  EXPECT_TRUE(Matches(*obj, R"({"n":12,"m":{"k":[true]}})"));
  EXPECT_EQ(AcceptedPrefix(*obj, R"({"n":1,"m":{"k": [true]}})"), 16u);  // const: its compact text
}

// The keywords beside an enum apply too: a value outside the bounds or lengths is no instance.
TEST(SchemaMatcher, EnumValuesMeetTheOtherKeywords) {
  auto s = Schema(R"({"type": "integer", "minimum": 5, "enum": [1, 7, 9, "x"]})");
  EXPECT_TRUE(Matches(*s, "7"));
  EXPECT_TRUE(Matches(*s, "9"));
  EXPECT_EQ(AcceptedPrefix(*s, "1"), 0u);
  auto str = Schema(R"({"enum": ["ab", "abcd", 3], "maxLength": 3, "exclusiveMaximum": 3})");
  EXPECT_TRUE(Matches(*str, R"("ab")"));
  EXPECT_FALSE(Matches(*str, R"("abcd")"));
  EXPECT_EQ(AcceptedPrefix(*str, "3"), 0u);
}

TEST(SchemaMatcher, ArraysStringsAndNumbersKeepTheirBounds) {
  auto arr = Schema(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2})");
  EXPECT_TRUE(Matches(*arr, "[1,2]"));
  EXPECT_TRUE(Matches(*arr, "[ -0 ]"));
  EXPECT_EQ(AcceptedPrefix(*arr, "[]"), 1u);
  EXPECT_EQ(AcceptedPrefix(*arr, "[1,2,3]"), 4u);
  EXPECT_EQ(AcceptedPrefix(*arr, "[1e5]"), 2u);
  auto str = Schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_TRUE(Matches(*str, R"("ab")"));
  EXPECT_TRUE(Matches(*str, "\"\xc3\xa9\xc3\xa9\xc3\xa9\""));  // three code points, six bytes
  EXPECT_TRUE(Matches(*str, R"("\n\u00e9")"));               // an escape is one character
  EXPECT_EQ(AcceptedPrefix(*str, R"("abcd")"), 4u);
  EXPECT_EQ(AcceptedPrefix(*str, R"("a")"), 2u);
  auto num = Schema(R"({"type": "number"})");
  EXPECT_TRUE(Matches(*num, "-1.5e+3"));
  EXPECT_FALSE(Matches(*num, "-"));
  EXPECT_EQ(AcceptedPrefix(*num, "01"), 1u);
}

TEST(SchemaMatcher, AnyOfTypeListsRefsAndMaps) {
  auto alt = Schema(R"({"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                  {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}]})");
  EXPECT_TRUE(Matches(*alt, R"({"a": 1})"));
  EXPECT_TRUE(Matches(*alt, R"({"b": "x"})"));
  EXPECT_EQ(AcceptedPrefix(*alt, R"({"a":"x"})"), 5u);
  auto opt = Schema(R"({"type": ["string", "null"]})");
  EXPECT_TRUE(Matches(*opt, "null"));
  EXPECT_TRUE(Matches(*opt, R"("x")"));
  EXPECT_EQ(AcceptedPrefix(*opt, "1"), 0u);
  auto tree = Schema(R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v", "kids"]}},
                         "$ref": "#/$defs/node"})");
  EXPECT_TRUE(Matches(*tree, R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  EXPECT_EQ(AcceptedPrefix(*tree, R"({"v":1,"kids":[{"v":2}]})"), 21u);
  auto map = Schema(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(Matches(*map, R"({"x": 1, "y\"z": 2})"));
  EXPECT_TRUE(Matches(*map, "{}"));
  EXPECT_EQ(AcceptedPrefix(*map, R"({"x":"s"})"), 5u);
  auto closed = Schema(R"({"type": "object", "additionalProperties": false})");
  EXPECT_TRUE(Matches(*closed, "{}"));
  EXPECT_EQ(AcceptedPrefix(*closed, R"({"a":1})"), 1u);
  auto any = Schema("{}");
  EXPECT_TRUE(Matches(*any, R"([1, {"a": null, "b": [true, false]}, "s", -2.5])"));
  EXPECT_EQ(AcceptedPrefix(*any, "[1,]"), 3u);
  // An anyOf that reaches itself through $ref neither loops nor accepts what it cannot start.
  auto loop = Schema(R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "integer"}]}}, "$ref": "#/$defs/a"})");
  EXPECT_TRUE(Matches(*loop, "7"));
  EXPECT_EQ(AcceptedPrefix(*loop, "x"), 0u);
}

// A forced tool call: the name first, then the arguments of the tool named (one parse, however
// many tools); a tool whose parameters cannot be enforced takes any object and is reported.
TEST(SchemaMatcher, ToolCallArgumentsFollowTheName) {
  std::vector<std::pair<std::string, ojson>> tools = {
      {"get_weather", ojson::parse(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})")},
      {"get_time", ojson::parse(R"({"type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}}, "required": ["tz"]})")},
      {"search", ojson::parse(R"({"type": "object", "properties": {"q": {"type": "integer", "multipleOf": 2}}})")},
      {"noop", nullptr}};
  for (int i = 0; i < 8; ++i) tools.push_back({"tool_" + std::to_string(i), ojson::parse(R"({"type": "object",
      "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": false})")});
  std::vector<std::string> relaxed;
  auto s = JsonSchema::CompileToolCall(tools, "arguments", &relaxed);
  ASSERT_EQ(relaxed.size(), 1u);
  EXPECT_NE(relaxed[0].find("search"), std::string::npos);
  EXPECT_NE(relaxed[0].find("multipleOf"), std::string::npos);
  for (const char* ok : {R"({"name": "get_time", "arguments": {"tz": "UTC"}})", R"({"name":"get_weather","arguments":{"city":"Oslo"}})",
                         R"({"name": "search", "arguments": {"q": "zz", "x": [1]}})", R"({"name": "noop", "arguments": {}})",
                         R"({"name": "tool_7", "arguments": {"n": 3}})"})
    EXPECT_TRUE(Matches(*s, ok)) << ok;
  const std::pair<const char*, size_t> bad[] = {
      {R"({"name": "get_time", "arguments": {"city": "x"}})", 36},   // get_time takes tz
      {R"({"name": "get_weather", "arguments": {"tz": "UTC"}})", 39},
      {R"({"name": "nope")", 12},                                     // "no" could be noop
      {R"({"arguments": {}})", 2},                                    // the name first
      {R"({"name": "tool_7", "arguments": {"n": 3, "m": 1}})", 39},  // additionalProperties false
      {R"({"name": "noop"})", 15},                                    // arguments required
  };
  for (const auto& [text, at] : bad) EXPECT_EQ(AcceptedPrefix(*s, text), at) << text;
  auto llama = JsonSchema::CompileToolCall({{"f", nullptr}}, "parameters", nullptr);
  EXPECT_TRUE(Matches(*llama, R"({"name": "f", "parameters": {"a": 1}})"));
}

// A discriminated union of kMaxParses object types (pydantic's Union of models with a Literal
// "type"): every variant stays reachable until its const value tells them apart.
TEST(SchemaMatcher, DiscriminatedUnionKeepsEveryVariant) {
  ojson alts = ojson::array();
  for (int i = 0; i < SchemaMatcher::kMaxParses; ++i)
    alts.push_back({{"type", "object"},
                    {"properties", {{"type", {{"const", "t" + std::to_string(i)}}}, {"v" + std::to_string(i), {{"type", "integer"}}}}},
                    {"required", {"type", "v" + std::to_string(i)}}});
  auto s = JsonSchema::Compile(ojson{{"anyOf", alts}});
  for (int i = 0; i < SchemaMatcher::kMaxParses; ++i) {
    const std::string ok = "{\"type\": \"t" + std::to_string(i) + "\", \"v" + std::to_string(i) + "\": 1}";
    EXPECT_TRUE(Matches(*s, ok)) << ok;
    const std::string wrong = "{\"type\": \"t" + std::to_string(i) + "\", \"v" + std::to_string((i + 1) % 8) + "\": 1}";
    EXPECT_FALSE(Matches(*s, wrong)) << wrong;
  }
}

// Integer bounds: a digit is refused as soon as no value in range can follow it; the value
// ends only in range.
TEST(SchemaMatcher, IntegerBoundsRefuseDigitsEarly) {
  auto s = Schema(R"({"type": "integer", "minimum": -5, "maximum": 120})");
  for (const char* ok : {"0", "-5", "-0", "7", "12", "120", "99"}) EXPECT_TRUE(Matches(*s, ok)) << ok;
  // "13" may go on (130 may not); "-6" is refused at its 6; "5" may begin 50.
  const std::pair<const char*, size_t> bad[] = {{"121", 2}, {"-6", 1}, {"130", 2}, {"1000", 3}, {"-10", 2}, {"2000", 2}};
  for (const auto& [text, at] : bad) EXPECT_EQ(AcceptedPrefix(*s, text), at) << text;
  auto positive = Schema(R"({"type": "integer", "exclusiveMinimum": 0, "maximum": 10})");
  EXPECT_EQ(AcceptedPrefix(*positive, "-"), 0u);
  EXPECT_EQ(AcceptedPrefix(*positive, "0"), 0u);
  EXPECT_TRUE(Matches(*positive, "10"));
  EXPECT_EQ(AcceptedPrefix(*positive, "11"), 1u);
  auto draft4 = Schema(R"({"type": "integer", "minimum": 5, "exclusiveMinimum": true})");
  EXPECT_EQ(AcceptedPrefix(*draft4, "5 "), 1u);  // 5 could begin 50, but cannot end there
  EXPECT_TRUE(Matches(*draft4, "6"));
  auto obj = Schema(R"({"type": "object", "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 100}},
                        "required": ["limit"]})");
  EXPECT_TRUE(Matches(*obj, R"({"limit": 100})"));
  EXPECT_EQ(AcceptedPrefix(*obj, R"({"limit": 0})"), 10u);
  EXPECT_EQ(AcceptedPrefix(*obj, R"({"limit": 101})"), 12u);
  EXPECT_EQ(AcceptedPrefix(*obj, R"({"limit": 10})"), 13u);  // then '}': 10 is in range
}

TEST(SchemaMatcher, WhitespaceCapAndStringBudget) {
  auto s = Schema(R"({"type": "object", "properties": {"s": {"type": "string", "maxLength": 4}, "t": {"type": "string"}},
                      "required": ["s", "t"]})");
  const std::string spaces(JsonMatcher::kMaxWhitespace + 1, ' ');
  EXPECT_EQ(AcceptedPrefix(*s, "{" + spaces), 1u + JsonMatcher::kMaxWhitespace);
  SchemaMatcher m(*s);
  ASSERT_TRUE(m.Accept(R"({"s": "ab)"));
  EXPECT_EQ(m.string_budget(), 2);
  ASSERT_TRUE(m.Accept(R"(", "t": "x)"));
  EXPECT_EQ(m.string_budget(), kUnlimited);
  ASSERT_TRUE(m.Accept(R"(")"));
  EXPECT_EQ(m.string_budget(), -1);
}

// `pattern` is matched against the decoded string (escapes decoded), anywhere in it unless
// anchored, alongside the length bounds; an enum's strings must match it too.
TEST(SchemaMatcher, PatternsMatchTheDecodedString) {
  auto email = Schema(R"({"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$"})");
  EXPECT_TRUE(Matches(*email, R"("ab@cd.com")"));
  EXPECT_EQ(AcceptedPrefix(*email, R"("ab@cd.org")"), 7u);  // refused at the 'o'
  EXPECT_EQ(AcceptedPrefix(*email, R"("Ab@cd.com")"), 1u);
  EXPECT_EQ(AcceptedPrefix(*email, R"("ab@cd.com ")"), 10u);
  auto digit = Schema(R"({"pattern": "x\\d"})");  // a string is inferred; unanchored
  EXPECT_TRUE(Matches(*digit, R"("aax1bb")"));
  EXPECT_EQ(AcceptedPrefix(*digit, R"("aaa")"), 4u);  // cannot close before "x<digit>"
  auto newline = Schema(R"({"type": "string", "pattern": "^a\nb\"q\"$"})");
  EXPECT_TRUE(Matches(*newline, R"("a\nb\"q\"")"));
  EXPECT_TRUE(Matches(*newline, R"("a\u000ab\u0022q\"")"));
  EXPECT_EQ(AcceptedPrefix(*newline, R"("a\tb")"), 3u);
  auto accent = Schema(R"({"type": "string", "pattern": "^\u00e9+$"})");
  EXPECT_TRUE(Matches(*accent, "\"\xc3\xa9\\u00e9\\u00E9\""));
  EXPECT_EQ(AcceptedPrefix(*accent, R"("\u00e8")"), 6u);  // refused at the last hex digit
  auto any = Schema(R"({"type": "string", "pattern": "."})");
  EXPECT_EQ(AcceptedPrefix(*any, R"("\ud83d\ude00")"), 4u);  // "d8" can only become a surrogate half
  EXPECT_TRUE(Matches(*any, "\"\xf0\x9f\x98\x80\""));        // the same code point as UTF-8
  auto bounded = Schema(R"({"type": "string", "pattern": "^a+$", "maxLength": 3})");
  EXPECT_TRUE(Matches(*bounded, R"("aaa")"));
  EXPECT_EQ(AcceptedPrefix(*bounded, R"("aaaa")"), 4u);
  SchemaMatcher m(*bounded);
  ASSERT_TRUE(m.Accept(R"("a)"));
  EXPECT_EQ(m.string_budget(), -1);  // plain tokens are not all alike under a pattern
  auto choices = Schema(R"({"enum": ["abc", "xyz", 3], "pattern": "^x"})");
  EXPECT_TRUE(Matches(*choices, R"("xyz")"));
  EXPECT_TRUE(Matches(*choices, "3"));
  EXPECT_FALSE(Matches(*choices, R"("abc")"));
}

// ---- seeded walks, judged by an independent validator --------------------------------------

bool Valid(const ojson& v, const ojson& s, const ojson& root);

bool ValidType(const ojson& v, const std::string& t) {
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "array") return v.is_array();
  if (t == "object") return v.is_object();
  return false;
}

size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}

bool Valid(const ojson& v, const ojson& s, const ojson& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) return Valid(v, root.at(ojson::json_pointer(s["$ref"].get<std::string>().substr(1))), root);
  if (s.contains("anyOf")) {
    for (const auto& a : s["anyOf"]) if (Valid(v, a, root)) return true;
    return false;
  }
  if (s.contains("type")) {
    bool any = false;
    if (s["type"].is_string()) any = ValidType(v, s["type"]);
    else for (const auto& t : s["type"]) any = any || ValidType(v, t);
    if (!any) return false;
  }
  if (s.contains("enum")) {
    bool any = false;
    for (const auto& e : s["enum"]) any = any || e == v;
    if (!any) return false;
  }
  if (s.contains("const") && s["const"] != v) return false;
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
  }
  if (v.is_string()) {
    const size_t n = CodePoints(v.get<std::string>());
    if (n < s.value("minLength", size_t(0)) || n > s.value("maxLength", size_t(1) << 30)) return false;
    // ECMAScript search, as JSON Schema says (the walks' patterns are ASCII: bytes = code points)
    if (s.contains("pattern") && !std::regex_search(v.get<std::string>(), std::regex(s["pattern"].get<std::string>())))
      return false;
  }
  if (v.is_array()) {
    if (v.size() < s.value("minItems", size_t(0)) || v.size() > s.value("maxItems", size_t(1) << 30)) return false;
    if (s.contains("items")) for (const auto& x : v) if (!Valid(x, s["items"], root)) return false;
  }
  if (v.is_object()) {
    const ojson props = s.value("properties", ojson::object());
    for (const auto& r : s.value("required", ojson::array())) if (!v.contains(r.get<std::string>())) return false;
    for (const auto& [k, x] : v.items()) {
      if (props.contains(k)) {
        if (!Valid(x, props[k], root)) return false;
      } else if (s.contains("additionalProperties")) {
        if (!Valid(x, s["additionalProperties"], root)) return false;
      }
    }
  }
  return true;
}

// Token 0 is EOS; then every printable ASCII byte, a few multi-byte pieces and a 2-byte code
// point, so that the walks meet keys, literals and strings split across tokens.
std::shared_ptr<const TokenTable> WalkTable() {
  std::vector<std::string> pieces = {"</s>"};
  for (int c = 0x20; c < 0x7f; ++c) pieces.push_back(std::string(1, char(c)));
  for (const char* p : {"{\"", "\":", "\": ", "\", \"", "\"}", "na", "name", "tr", "true", "null", "12", ", ",
                        "\xc3\xa9", "\\n", "\\u00", "]}", "[{", "\n", "ki", "ds"})
    pieces.push_back(p);
  std::vector<uint8_t> special(pieces.size(), 0);
  special[0] = 1;
  return std::make_shared<const TokenTable>(TokenTable::Make(pieces, special, {0}));
}

TEST(SchemaConstraint, SeededWalksEndAsInstancesAndTheMaskIsExact) {
  const char* schemas[] = {
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"},
          "ok": {"type": "boolean"}}, "required": ["name", "ok"]})",
      R"({"type": "array", "items": {"enum": ["red", "green", 7, null]}, "minItems": 1, "maxItems": 4})",
      R"({"type": "array", "items": {"type": "integer", "minimum": -30, "exclusiveMaximum": 250}, "maxItems": 5})",
      R"({"$defs": {"n": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array",
          "items": {"$ref": "#/$defs/n"}, "maxItems": 2}}, "required": ["v", "kids"]}}, "$ref": "#/$defs/n"})",
      R"({"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-z]{2,5}(-[0-9]+)?$"},
          "note": {"type": "string", "pattern": "\\d", "maxLength": 8}, "tag": {"enum": ["na", "nb", "tr"], "pattern": "^n"}},
          "required": ["id", "note", "tag"]})",
      R"({"anyOf": [{"type": "string", "minLength": 2, "maxLength": 5}, {"type": "null"},
                    {"type": "object", "additionalProperties": {"type": "number"}}]})",
  };
  auto table = WalkTable();
  const size_t vocab = table->bytes.size();
  for (const char* text : schemas) {
    const ojson doc = ojson::parse(text);
    auto schema = JsonSchema::Compile(doc);
    int ended_walks = 0;
    std::vector<int32_t> closers;  // ends come sooner
    for (const char* closer : {"}", "]", "\"", ",", "0", "\"}", "]}"})
      for (size_t id = 1; id < vocab; ++id)
        if (table->bytes[id] == closer) closers.push_back(int32_t(id));
    for (uint64_t seed = 0; seed < 30; ++seed) {
      SamplingParams p;
      p.token_table = table;
      p.json_schema = schema;
      const Walk w = CheckedWalk(p, seed, 300, [&](std::vector<float>& row) {
        for (int32_t id : closers) row[size_t(id)] = 2.5f;
        row[0] = 3.0f;  // EOS, where allowed
      }, text);
      const std::string& out = w.text;
      const bool ended = w.ended;
      SCOPED_TRACE(std::string(text) + " -> " + out);
      if (!ended) continue;  // a walk may run out of steps on a valid prefix
      ++ended_walks;
      const ojson v = ojson::parse(out, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(v.is_discarded());
      EXPECT_TRUE(Valid(v, doc, doc));
    }
    EXPECT_GE(ended_walks, 20) << text;
  }
}

}  // namespace
}  // namespace pg::runtime
