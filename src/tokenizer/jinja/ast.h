// Syntax tree of a parsed template. Nodes are immutable after parsing and owned by the
// Template (unique_ptr children); the interpreter only reads them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace pg::jinja {

struct SourcePos {
  int line = 1;    // 1-based
  int column = 1;  // 1-based, in bytes
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // args = items
  kTuple,      // args = items
  kDict,       // args = key0, value0, key1, value1, ...
  kGetAttr,    // args[0].name
  kGetItem,    // args[0][args[1]]
  kSlice,      // args[0][args[1]:args[2]:args[3]] (missing parts are null)
  kCall,       // args[0](args[1..], kwargs)
  kFilter,     // args[0] | name(args[1..], kwargs)
  kTest,       // args[0] is [not] name(args[1..]); negated
  kUnary,      // op args[0]; op in {"-", "+", "not"}
  kBinary,     // args[0] op args[1]; op in {+ - * / // % ** ~ == != < <= > >= in notin and or}
  kCondExpr,   // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  SourcePos pos;
  std::string name;  // name / attribute / filter / test / operator
  Value literal;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;
  int depth = 1;  // height of this subtree; the parser bounds it (destruction and evaluation recurse)
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,        // text
  kOutput,      // {{ expr }}
  kIf,          // branches (cond, body) ...; else_body
  kFor,         // for targets in expr [if filter]: body [else else_body]
  kSet,         // set targets = expr, or block set: set target %}body{% endset
  kMacro,       // macro name(params = defaults): body
  kCallBlock,   // call[(caller_params)] expr: body
  kFilterBlock, // filter expr(applied to body text): body
  kBreak,
  kContinue,
};

// Target of a set/for: a plain name or `ns.attr`.
struct Target {
  std::string name;
  std::string attr;  // non-empty for namespace attribute assignment
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind;
  SourcePos pos;
  std::string text;
  ExprPtr expr;     // output / for iterable / set value / call expr / filter (operand is null)
  ExprPtr filter;   // for-loop `if` condition
  std::vector<Target> targets;
  bool target_is_tuple = false;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;  // macro name
  std::vector<MacroParam> params;
};

}  // namespace pg::jinja
