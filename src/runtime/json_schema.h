// Structured outputs (OpenAI `response_format: {"type": "json_schema"}`): generation
// constrained to one instance of a JSON schema, then an end-of-sequence token.
//
// JsonSchema::Compile turns a schema into a graph of nodes; SchemaMatcher is a byte-level
// recognizer of prefixes of the schema's instances over that graph (a stack of frames per
// parse, several parses at once where anyOf leaves the choice open); ByteConstraint
// (runtime/token_mask.h) masks logits with it exactly.
//
// Supported (the rest is refused by Compile with the keyword and its JSON pointer, never
// ignored): type (one or a list), properties + required (properties are generated in the
// schema's order; optional ones may be left out), additionalProperties (with properties only
// the declared ones are generated, which every additionalProperties allows; without
// properties, additionalProperties: a schema / true / absent gives an object of such values,
// false gives {}), items, minItems / maxItems, minLength / maxLength (code points), enum,
// const, anyOf, oneOf (generated as anyOf), allOf of one schema, $ref into the document
// ("#/$defs/...", recursion included), boolean schemas, minimum / maximum / exclusiveMinimum /
// exclusiveMaximum on integers (a digit is refused as soon as no value in range can follow),
// pattern (runtime/regex.h's syntax, matched anywhere in the decoded string as JSON Schema
// says; a \u escape of a surrogate is refused inside such a string). Annotations (title, description,
// default, examples, format, ...) are ignored: `format` is an annotation in JSON Schema
// 2020-12. Integers are generated without fraction or exponent. Outside strings whitespace
// is allowed where JSON allows it, at most JsonMatcher::kMaxWhitespace bytes in a row.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "runtime/regex.h"
#include "runtime/token_mask.h"

namespace pg::runtime {

class JsonSchema {
 public:
  enum class Kind : uint8_t { kObject, kMap, kArray, kString, kNumber, kLiteral, kAnyOf, kAny };
  static constexpr uint32_t kUnbounded = 0xFFFFFFFFu;

  struct Node {
    Kind kind = Kind::kAny;
    bool integer = false;                      // kNumber: no fraction / exponent
    bool bounded = false;                      // kNumber, integer: only values in [lo, hi]
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    uint32_t min = 0, max = kUnbounded;        // kString: code points; kArray: items
    std::shared_ptr<const Regex> pattern;      // kString: the decoded text must contain a match
    int32_t child = -1;                        // kMap: the values' node; kArray: the items'
    std::vector<int32_t> alts;                 // kAnyOf
    // kLiteral: the allowed values as compact JSON texts, sorted; kObject: the property names
    // as JSON strings (with quotes), sorted, and lit_prop[i] the property lits[i] names.
    std::vector<std::string> lits;
    std::vector<int32_t> lit_prop;
    std::vector<int32_t> prop_node;            // kObject: property i's value node (schema order)
    std::vector<uint32_t> next_required;       // kObject: [i]: first required property >= i
                                               // (props() when none); size props() + 1
    // kObject, tagged (a tool call {"name": N, <arguments key>: A}): property 0's value is the
    // kLiteral node prop_node[0] (the names, sorted), and property 1's node is tag_node[i] for
    // the name lits[i] of that literal node: the arguments follow the name written.
    std::vector<int32_t> tag_node;
    size_t props() const { return prop_node.size(); }
  };

  // Throws pg::Error(kInvalidArgument) naming the keyword and its JSON pointer for a schema
  // this cannot enforce (or that allows nothing).
  static std::shared_ptr<const JsonSchema> Compile(const nlohmann::ordered_json& schema);
  // One tool call as a JSON object {"name": <one of the tools>, <args_key>: <its parameters>}
  // (tools: name -> parameters schema, null for any object). A tool whose parameters cannot be
  // enforced gets any object; its name and the reason are appended to `relaxed`.
  static std::shared_ptr<const JsonSchema> CompileToolCall(
      const std::vector<std::pair<std::string, nlohmann::ordered_json>>& tools, const std::string& args_key,
      std::vector<std::string>* relaxed);

  const Node& node(int32_t i) const { return nodes_[size_t(i)]; }
  int32_t root() const { return root_; }
  size_t size() const { return nodes_.size(); }

  // Fixed nodes every schema has: any value, and the parts of "any value".
  static constexpr int32_t kAnyNode = 0, kAnyMap = 1, kAnyArray = 2, kAnyString = 3, kAnyNumber = 4,
                           kAnyLiteral = 5;

 private:
  friend class SchemaCompiler;
  std::vector<Node> nodes_;
  int32_t root_ = kAnyNode;
};

// A prefix recognizer of one schema's instances (runtime/token_mask.h's matcher interface).
// A value type of at most a few KB, of which copies touch only the live part.
class SchemaMatcher {
 public:
  static constexpr int kMaxDepth = 32;    // frames a parse: nesting + 1
  // Open anyOf choices tracked at once (a union of 8 object types, told apart by a "type"
  // const, keeps all 8 until that value); more are dropped: the mask is then stricter than the
  // schema, never looser. The trie walk keeps one matcher a byte of depth (~4 KB each).
  static constexpr int kMaxParses = 8;

  // The schema must outlive the matcher and its copies (MakeOutputConstraint's constraint keeps
  // it alive): copies are made per trie node and do not touch a reference count.
  explicit SchemaMatcher(const JsonSchema& schema);
  SchemaMatcher(const SchemaMatcher& o) { *this = o; }
  SchemaMatcher& operator=(const SchemaMatcher& o);

  bool Accept(uint8_t c);
  bool Accept(std::string_view bytes);
  bool can_end() const;
  int string_budget() const;
  // Inside a string with a pattern (one parse): plain tokens are written raw through the
  // pattern's automaton, within maxLength.
  RegexView regex_view() const;

 private:
  enum class FrameKind : uint8_t { kRoot, kObject, kKey, kMap, kArray, kString, kNumber, kLiteral };
  // One open value. Field use by kind: a / b: object: the next property at or past which a key
  // may come (cursor) / the property whose key was just read, tag: a tagged object's tag;
  // array: items so far; string: code points so far, tag 1 for a map's key, b (with a pattern)
  // the pattern's automaton state in its low 16 bits and a \u escape's value in the high 16;
  // literal and key: the
  // candidate range [a, b) of the node's lits, aux the bytes matched; bounded integer: the
  // magnitude so far (b:a, 64 bits), aux its digits, tag 1 when negative. phase: the kind's
  // sub-state. No padding: frames compare by memcmp.
  struct Frame {  // no member initializers: the unused part of a parse stays unwritten
    uint16_t node;
    FrameKind kind;
    uint8_t phase;
    uint8_t ws;   // consecutive whitespace bytes
    uint8_t aux;
    uint16_t tag;
    uint32_t a, b;
  };
  static Frame NewFrame(uint16_t node, FrameKind kind, uint8_t phase, uint32_t a = 0, uint32_t b = 0) {
    return Frame{node, kind, phase, 0, 0, 0, a, b};
  }
  struct Parse {  // copies move the live frames only
    int depth;
    std::array<Frame, kMaxDepth> f;
    Parse() = default;
    Parse(const Parse& o) : depth(o.depth) { CopyFrames(o); }
    Parse& operator=(const Parse& o) {
      depth = o.depth;
      CopyFrames(o);
      return *this;
    }
    void CopyFrames(const Parse& o) {
      for (int i = 0; i < o.depth; ++i) f[size_t(i)] = o.f[size_t(i)];
    }
    Frame& top() { return f[size_t(depth - 1)]; }
    const Frame& top() const { return f[size_t(depth - 1)]; }
    bool operator==(const Parse& o) const;
  };

  void Feed(Parse p, uint8_t c, SchemaMatcher& out) const;
  // Pushes node's frame for a value that begins with c (anyOf: one parse per alternative,
  // hops counting the anyOf levels passed).
  void StartValue(Parse p, int32_t node, uint8_t c, SchemaMatcher& out, int hops = 0) const;
  void Complete(Parse p, SchemaMatcher& out, const uint8_t* refeed) const;  // pops the top value
  void Emit(const Parse& p, SchemaMatcher& out) const;
  static bool ParseCanEnd(const Parse& p, const JsonSchema& s);
  // A bounded integer's frame (JsonSchema::Node::bounded): some value in range can still be
  // written from here / the value so far is in range.
  static bool IntegerFeasible(const Frame& f, const JsonSchema::Node& n);
  static bool IntegerInRange(const Frame& f, const JsonSchema::Node& n);

  const JsonSchema* schema_ = nullptr;
  int n_ = 0;
  std::array<Parse, kMaxParses> parses_;
};

using SchemaConstraint = ByteConstraint<SchemaMatcher>;

// The constraint SamplingParams asks for: JSON mode (schema null) or the schema's.
std::unique_ptr<OutputConstraint> MakeOutputConstraint(std::shared_ptr<const TokenTable> table,
                                                       std::shared_ptr<const JsonSchema> schema);

}  // namespace pg::runtime
