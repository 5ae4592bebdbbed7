// Tree-walking evaluator (internal to pg::jinja). One Interpreter per Render call.
//
// Scoping follows jinja2: every for-loop iteration and every macro call gets a fresh frame
// whose parent is the enclosing frame, so `set` inside a loop body never leaks out of it
// (namespaces exist for that), while `set` inside if/elif/else writes to the enclosing frame.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/jinja/value.h"

namespace pg::jinja {

// Variables of one scope. Scopes hold a handful of names, so a flat vector beats a hash map
// (one allocation, no hashing) on the per-iteration frames of for loops.
struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Frame> parent;
  const Value* Find(std::string_view name) const;          // this scope only
  const Value* Lookup(std::string_view name) const;        // this scope, then parents
  void Set(std::string_view name, Value value);
  Value& Slot(std::string_view name) {                     // insert-or-get in this scope
    for (auto& [k, v] : vars) {
      if (k == name) return v;
    }
    return vars.emplace_back(std::string(name), Value()).second;
  }
};
using FramePtr = std::shared_ptr<Frame>;

// Thrown by helpers that do not know the source position; the evaluator adds it.
struct EvalError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Interpreter {
 public:
  explicit Interpreter(const TemplateOptions& options);

  std::string Render(const Body& body, const Value& context);

  // Helpers the builtins use.
  Value CallValue(const Value& callee, const CallArgs& args);
  Value ApplyFilter(const std::string& name, const Value& operand, const CallArgs& args);
  bool ApplyTest(const std::string& name, const Value& operand, const CallArgs& args);
  Value GetAttr(const Value& obj, const std::string& name);
  Value GetItem(const Value& obj, const Value& key);
  const TemplateOptions& options() const { return options_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow ExecBody(const Body& body, const FramePtr& frame, std::string& out);
  Flow ExecStmt(const Stmt& s, const FramePtr& frame, std::string& out);
  Flow ExecStmtInner(const Stmt& s, const FramePtr& frame, std::string& out);
  void ExecFor(const Stmt& s, const FramePtr& frame, std::string& out);
  void ExecSet(const Stmt& s, const FramePtr& frame, std::string& out);
  Value MakeMacro(const Stmt& s, const FramePtr& closure, const Body* body_override);
  void Assign(const Stmt& s, const FramePtr& frame, const Value& value);

  Value Eval(const Expr& e, const FramePtr& frame);
  Value EvalInner(const Expr& e, const FramePtr& frame);
  Value EvalBinary(const Expr& e, const FramePtr& frame);
  CallArgs EvalArgs(const Expr& e, const FramePtr& frame, size_t first_arg);

  TemplateOptions options_;
  FramePtr globals_;
  std::vector<FramePtr> closures_;  // frames macros were defined in, alive for the render
  int depth_ = 0;       // macro recursion depth, bounded so a template cannot blow the stack
  int eval_depth_ = 0;  // expression nesting (left-deep chains like a+a+a+... included)
};

// Builtins (builtins.cpp, methods.cpp).
Value CallFilter(Interpreter& in, const std::string& name, const Value& operand, const CallArgs& args);
bool CallTest(Interpreter& in, const std::string& name, const Value& operand, const CallArgs& args);
bool HasFilter(const std::string& name);
bool HasTest(const std::string& name);
// Bound method `name` of a str/list/dict, or undefined when there is none.
Value GetMethod(Interpreter& in, const Value& obj, const std::string& name);
void AddGlobals(Interpreter& in, Frame& globals);

// Iterates a value as jinja2's for loop does (list items, dict keys, string code points).
ValueList Iterate(const Value& v);
// Python binary operators; throw EvalError on type errors.
Value BinaryOp(const std::string& op, const Value& a, const Value& b);
bool Contains(const Value& container, const Value& item);

// String helpers shared by methods and filters (methods.cpp). Case mapping is ASCII-only.
std::string StripChars(const std::string& s, const Value* chars, bool left, bool right);
std::string PyTitle(const std::string& s);
std::string AsciiMap(const std::string& s, int (*f)(int));
std::string Capitalize(const std::string& s);
std::string ReplaceAll(const std::string& s, const std::string& from, const std::string& to, int64_t count);
ValueList PySplit(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right);

}  // namespace pg::jinja
