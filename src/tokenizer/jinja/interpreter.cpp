#include "tokenizer/jinja/interpreter.h"

#include <cmath>

#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace pg::jinja {
namespace {
constexpr int kMaxCallDepth = 200;
constexpr int kMaxEvalDepth = 1000;

[[noreturn]] void Fail(const std::string& message) { throw EvalError(message); }

[[noreturn]] void FailUndefined(const Value& v) {
  Fail(v.str().empty() ? "value is undefined" : v.str());
}
}  // namespace

const Value* Frame::Find(std::string_view name) const {
  for (const auto& [k, v] : vars) {
    if (k == name) return &v;
  }
  return nullptr;
}

void Frame::Set(std::string_view name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(std::string(name), std::move(value));
}

const Value* Frame::Lookup(std::string_view name) const {
  for (const Frame* f = this; f; f = f->parent.get()) {
    if (const Value* v = f->Find(name)) return v;
  }
  return nullptr;
}

Interpreter::Interpreter(const TemplateOptions& options)
    : options_(options), globals_(std::make_shared<Frame>()) {
  AddGlobals(*this, *globals_);
}

std::string Interpreter::Render(const Body& body, const Value& context) {
  if (!context.is_dict()) throw TemplateError("chat template context must be an object", false);
  auto root = std::make_shared<Frame>();
  root->parent = globals_;
  for (const auto& [k, v] : context.dict().entries) {
    if (!k.is_string()) throw TemplateError("chat template context keys must be strings", false);
    root->Slot(k.str()) = v;
  }
  std::string out;
  ExecBody(body, root, out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Statements

Interpreter::Flow Interpreter::ExecBody(const Body& body, const FramePtr& frame, std::string& out) {
  for (const auto& s : body) {
    Flow f = ExecStmt(*s, frame, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecStmt(const Stmt& s, const FramePtr& frame, std::string& out) {
  try {
    return ExecStmtInner(s, frame, out);
  } catch (const TemplateError&) {
    throw;
  } catch (const EvalError& err) {
    throw TemplateError(fmt::format("chat template error at {}: {}", FormatPos(s.pos), err.what()), false);
  } catch (const Error& err) {
    throw TemplateError(fmt::format("chat template error at {}: {}", FormatPos(s.pos), err.what()), false);
  }
}

Interpreter::Flow Interpreter::ExecStmtInner(const Stmt& s, const FramePtr& frame, std::string& out) {
  switch (s.kind) {
    case StmtKind::kText: out += s.text; break;
    case StmtKind::kOutput: Eval(*s.expr, frame).AppendTo(out); break;
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches) {
        if (Eval(*cond, frame).Truthy()) return ExecBody(body, frame, out);
      }
      return ExecBody(s.else_body, frame, out);
    case StmtKind::kFor: ExecFor(s, frame, out); break;
    case StmtKind::kSet: ExecSet(s, frame, out); break;
    case StmtKind::kMacro: frame->Slot(s.name) = MakeMacro(s, frame, nullptr); break;
    case StmtKind::kCallBlock: {
      const Expr& call = *s.expr;
      Value callee = Eval(*call.args[0], frame);
      CallArgs args = EvalArgs(call, frame, 1);
      args.keyword.emplace_back("caller", MakeMacro(s, frame, &s.body));
      try {
        out += CallValue(callee, args).ToString();
      } catch (const EvalError& e) {
        throw TemplateError(fmt::format("chat template error at {}: {}", FormatPos(s.pos), e.what()), false);
      }
      break;
    }
    case StmtKind::kFilterBlock: {
      std::string text;
      auto inner = std::make_shared<Frame>();
      inner->parent = frame;
      ExecBody(s.body, inner, text);
      // Walk the filter chain inside-out: the innermost filter's operand is the body text.
      std::vector<const Expr*> chain;
      for (const Expr* f = s.expr.get(); f; f = f->args[0].get()) chain.push_back(f);
      Value v(std::move(text));
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        try {
          v = ApplyFilter((*it)->name, v, EvalArgs(**it, frame, 1));
        } catch (const EvalError& e) {
          throw TemplateError(fmt::format("chat template error at {}: {}", FormatPos(s.pos), e.what()), false);
        }
      }
      out += v.ToString();
      break;
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

void Interpreter::Assign(const Stmt& s, const FramePtr& frame, const Value& value) {
  auto assign_one = [&](const Target& t, const Value& v) {
    if (t.attr.empty()) {
      frame->Slot(t.name) = v;
      return;
    }
    const Value* ns = frame->Lookup(t.name);
    if (!ns || !ns->is_namespace()) {
      throw TemplateError(fmt::format("chat template error at {}: cannot assign attribute '{}' on '{}': "
                                      "not a namespace()", FormatPos(s.pos), t.attr, t.name), false);
    }
    ns->dict().Set(Value(t.attr), v);
  };
  if (!s.target_is_tuple) {
    assign_one(s.targets[0], value);
    return;
  }
  ValueList items = Iterate(value);
  if (items.size() != s.targets.size()) {
    throw TemplateError(fmt::format("chat template error at {}: cannot unpack {} values into {} names",
                                    FormatPos(s.pos), items.size(), s.targets.size()), false);
  }
  for (size_t i = 0; i < items.size(); ++i) assign_one(s.targets[i], items[i]);
}

void Interpreter::ExecSet(const Stmt& s, const FramePtr& frame, std::string& out) {
  (void)out;
  if (s.expr) {
    Assign(s, frame, Eval(*s.expr, frame));
    return;
  }
  std::string text;
  auto inner = std::make_shared<Frame>();
  inner->parent = frame;
  ExecBody(s.body, inner, text);
  Assign(s, frame, Value(std::move(text)));
}

void Interpreter::ExecFor(const Stmt& s, const FramePtr& frame, std::string& out) {
  Value iterable = Eval(*s.expr, frame);
  if (!iterable.is_undefined() && !iterable.is_sequence_like() && !iterable.is_dict() &&
      !iterable.is_string()) {
    throw TemplateError(fmt::format("chat template error at {}: '{}' object is not iterable",
                                    FormatPos(s.expr->pos), iterable.TypeName()), false);
  }
  ValueList items = Iterate(iterable);
  auto bind = [&](const FramePtr& f, const Value& item) {
    if (!s.target_is_tuple) {
      f->Slot(s.targets[0].name) = item;
      return;
    }
    ValueList parts = Iterate(item);
    if (parts.size() != s.targets.size()) {
      throw TemplateError(fmt::format("chat template error at {}: cannot unpack {} values into {} loop "
                                      "variables", FormatPos(s.pos), parts.size(), s.targets.size()), false);
    }
    for (size_t i = 0; i < parts.size(); ++i) f->Slot(s.targets[i].name) = parts[i];
  };
  if (s.filter) {
    ValueList kept;
    for (const auto& item : items) {
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      bind(f, item);
      if (Eval(*s.filter, f).Truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    ExecBody(s.else_body, frame, out);
    return;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  // One `loop` object per loop, updated in place each iteration (as jinja2's LoopContext).
  // Entry order is fixed so updates index directly; previtem/nextitem are removed (undefined)
  // at the ends.
  enum { kIndex, kIndex0, kRevindex, kRevindex0, kFirst, kLast, kLength, kDepth, kDepth0, kCycle, kPrev, kNext };
  auto current = std::make_shared<int64_t>(0);
  Dict loop_dict;
  loop_dict.entries.reserve(12);
  for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth",
                          "depth0", "cycle", "previtem", "nextitem"}) {
    loop_dict.entries.emplace_back(Value(key), Value());
  }
  loop_dict.entries[kLength].second = Value(n);
  loop_dict.entries[kDepth].second = Value(int64_t{1});
  loop_dict.entries[kDepth0].second = Value(int64_t{0});
  loop_dict.entries[kCycle].second = Value::Function("cycle", [current](const CallArgs& a, Interpreter&) -> Value {
    if (a.positional.empty()) Fail("no items for cycling given");
    return a.positional[static_cast<size_t>(*current) % a.positional.size()];
  });
  Value loop = Value::MakeDict(std::move(loop_dict));
  auto& entries = loop.dict().entries;
  const Value prev_key("previtem"), next_key("nextitem");
  for (int64_t i = 0; i < n; ++i) {
    auto f = std::make_shared<Frame>();
    f->parent = frame;
    bind(f, items[i]);
    *current = i;
    entries.resize(kPrev);
    entries[kIndex].second = Value(i + 1);
    entries[kIndex0].second = Value(i);
    entries[kRevindex].second = Value(n - i);
    entries[kRevindex0].second = Value(n - i - 1);
    entries[kFirst].second = Value(i == 0);
    entries[kLast].second = Value(i == n - 1);
    if (i > 0) entries.emplace_back(prev_key, items[i - 1]);
    if (i + 1 < n) entries.emplace_back(next_key, items[i + 1]);
    f->Set("loop", loop);
    if (ExecBody(s.body, f, out) == Flow::kBreak) break;
  }
}

Value Interpreter::MakeMacro(const Stmt& s, const FramePtr& closure, const Body* body_override) {
  const Stmt* stmt = &s;
  const Body* body = body_override ? body_override : &s.body;
  std::string name = body_override ? "caller" : s.name;
  // The macro lives in a frame that its closure keeps alive: hold the closure weakly (no
  // shared_ptr cycle, no leak per render) and let the interpreter own it until Render ends.
  closures_.push_back(closure);
  std::weak_ptr<Frame> weak_closure = closure;
  return Value::Function(name, [this, stmt, body, weak_closure, name](const CallArgs& args, Interpreter&) {
    FramePtr closure = weak_closure.lock();
    PG_CHECK(closure != nullptr, "macro closure outlived its render");
    if (++depth_ > kMaxCallDepth) {
      --depth_;
      Fail(fmt::format("macro '{}' nested more than {} calls deep", name, kMaxCallDepth));
    }
    auto f = std::make_shared<Frame>();
    f->parent = closure;
    const auto& params = stmt->params;
    ValueList varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) f->Slot(params[i].name) = args.positional[i];
      else varargs.push_back(args.positional[i]);
    }
    Dict extra_kwargs;
    for (const auto& [k, v] : args.keyword) {
      bool is_param = false;
      for (const auto& p : params) is_param |= p.name == k;
      if (is_param || k == "caller") f->Slot(k) = v;
      else extra_kwargs.Set(Value(k), v);
    }
    for (const auto& p : params) {
      if (f->Find(p.name)) continue;
      f->Slot(p.name) = p.default_value ? Eval(*p.default_value, f)
                                        : Value::Undefined(fmt::format("'{}' is undefined", p.name));
    }
    f->Slot("varargs") = Value::Tuple(std::move(varargs));
    f->Slot("kwargs") = Value::MakeDict(std::move(extra_kwargs));
    std::string out;
    try {
      ExecBody(*body, f, out);
    } catch (...) {
      --depth_;
      throw;
    }
    --depth_;
    return Value(std::move(out));
  });
}

// ---------------------------------------------------------------------------------------------
// Expressions

Value Interpreter::Eval(const Expr& e, const FramePtr& frame) {
  struct DepthGuard {
    int& d;
    ~DepthGuard() { --d; }
  } guard{++eval_depth_};
  try {
    if (eval_depth_ > kMaxEvalDepth) Fail(fmt::format("expression nested more than {} deep", kMaxEvalDepth));
    return EvalInner(e, frame);
  } catch (const TemplateError&) {
    throw;
  } catch (const EvalError& err) {
    throw TemplateError(fmt::format("chat template error at {}: {}", FormatPos(e.pos), err.what()), false);
  } catch (const Error& err) {
    throw TemplateError(fmt::format("chat template error at {}: {}", FormatPos(e.pos), err.what()), false);
  }
}

CallArgs Interpreter::EvalArgs(const Expr& e, const FramePtr& frame, size_t first_arg) {
  CallArgs args;
  for (size_t i = first_arg; i < e.args.size(); ++i) args.positional.push_back(Eval(*e.args[i], frame));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, Eval(*v, frame));
  return args;
}

Value Interpreter::EvalInner(const Expr& e, const FramePtr& frame) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: {
      const Value* v = frame->Lookup(e.name);
      return v ? *v : Value::Undefined(fmt::format("'{}' is undefined", e.name));
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      for (const auto& a : e.args) items.push_back(Eval(*a, frame));
      return e.kind == ExprKind::kList ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) d.Set(Eval(*e.args[i], frame), Eval(*e.args[i + 1], frame));
      return Value::MakeDict(std::move(d));
    }
    case ExprKind::kGetAttr: return GetAttr(Eval(*e.args[0], frame), e.name);
    case ExprKind::kGetItem: return GetItem(Eval(*e.args[0], frame), Eval(*e.args[1], frame));
    case ExprKind::kSlice: {
      Value obj = Eval(*e.args[0], frame);
      if (obj.is_undefined()) FailUndefined(obj);
      std::optional<int64_t> parts[3];
      for (int i = 0; i < 3; ++i) {
        if (!e.args[i + 1]) continue;
        Value p = Eval(*e.args[i + 1], frame);
        if (p.is_none()) continue;
        if (!p.is_int() && !p.is_bool()) Fail("slice indices must be integers or None");
        parts[i] = p.as_int();
      }
      int64_t step = parts[2].value_or(1);
      if (step == 0) Fail("slice step cannot be zero");
      bool is_str = obj.is_string();
      std::vector<std::string> chars;
      const ValueList* list = nullptr;
      int64_t n;
      if (is_str) {
        chars = SplitCodepoints(obj.str());
        n = static_cast<int64_t>(chars.size());
      } else if (obj.is_sequence_like() && !obj.is_generator()) {
        list = &obj.list();
        n = static_cast<int64_t>(list->size());
      } else {
        Fail(fmt::format("'{}' object is not subscriptable", obj.TypeName()));
      }
      auto clamp = [&](std::optional<int64_t> v, int64_t dflt) -> int64_t {
        if (!v) return dflt;
        int64_t x = *v < 0 ? *v + n : *v;
        if (step > 0) return std::clamp<int64_t>(x, 0, n);
        return std::clamp<int64_t>(x, -1, n - 1);
      };
      int64_t start = clamp(parts[0], step > 0 ? 0 : n - 1);
      int64_t stop = clamp(parts[1], step > 0 ? n : -1);
      std::string s_out;
      ValueList l_out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (is_str) s_out += chars[static_cast<size_t>(i)];
        else l_out.push_back((*list)[static_cast<size_t>(i)]);
      }
      if (is_str) return Value(std::move(s_out));
      return obj.is_tuple() ? Value::Tuple(std::move(l_out)) : Value::List(std::move(l_out));
    }
    case ExprKind::kCall: {
      Value callee = Eval(*e.args[0], frame);
      return CallValue(callee, EvalArgs(e, frame, 1));
    }
    case ExprKind::kFilter: {
      if (!HasFilter(e.name)) Fail(fmt::format("no filter named '{}'", e.name));
      Value operand = Eval(*e.args[0], frame);
      return ApplyFilter(e.name, operand, EvalArgs(e, frame, 1));
    }
    case ExprKind::kTest: {
      Value operand = Eval(*e.args[0], frame);
      bool r = ApplyTest(e.name, operand, EvalArgs(e, frame, 1));
      return Value(e.negated ? !r : r);
    }
    case ExprKind::kUnary: {
      Value v = Eval(*e.args[0], frame);
      if (e.name == "not") return Value(!v.Truthy());
      if (v.is_undefined()) FailUndefined(v);
      if (!v.is_number()) Fail(fmt::format("bad operand type for unary {}: '{}'", e.name, v.TypeName()));
      if (e.name == "+") return v.is_float() ? Value(v.as_double()) : Value(v.as_int());
      if (!v.is_float() && v.as_int() == INT64_MIN) Fail("integer overflow (integers beyond 64 bits are not supported)");
      return v.is_float() ? Value(-v.as_double()) : Value(-v.as_int());
    }
    case ExprKind::kBinary: return EvalBinary(e, frame);
    case ExprKind::kCondExpr: {
      if (Eval(*e.args[0], frame).Truthy()) return Eval(*e.args[1], frame);
      if (e.args[2]) return Eval(*e.args[2], frame);
      return Value::Undefined("the inline if-expression evaluated to false and no else section was defined");
    }
  }
  Fail("unknown expression");
}

Value Interpreter::EvalBinary(const Expr& e, const FramePtr& frame) {
  const std::string& op = e.name;
  Value a = Eval(*e.args[0], frame);
  if (op == "and") return a.Truthy() ? Eval(*e.args[1], frame) : a;
  if (op == "or") return a.Truthy() ? a : Eval(*e.args[1], frame);
  Value b = Eval(*e.args[1], frame);
  if ((op == "+" || op == "~") && b.is_string() && !b.is_markup() && a.AppendIfUnique(b.str())) return a;
  return BinaryOp(op, a, b);
}

Value Interpreter::CallValue(const Value& callee, const CallArgs& args) {
  if (callee.is_undefined()) FailUndefined(callee);
  if (!callee.is_callable()) Fail(fmt::format("'{}' object is not callable", callee.TypeName()));
  return callee.callable().fn(args, *this);
}

Value Interpreter::ApplyFilter(const std::string& name, const Value& operand, const CallArgs& args) {
  return CallFilter(*this, name, operand, args);
}

bool Interpreter::ApplyTest(const std::string& name, const Value& operand, const CallArgs& args) {
  return CallTest(*this, name, operand, args);
}

Value Interpreter::GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) FailUndefined(obj);
  if (obj.is_namespace()) {
    if (const Value* v = obj.dict().Find(name)) return *v;
    return Value::Undefined(fmt::format("'Namespace' object has no attribute '{}'", name));
  }
  Value method = GetMethod(*this, obj, name);
  if (!method.is_undefined()) return method;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(name)) return *v;
  }
  return Value::Undefined(fmt::format("'{} object' has no attribute '{}'", obj.TypeName(), name));
}

Value Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) FailUndefined(obj);
  if (obj.is_mapping()) {
    if (const Value* v = obj.dict().Find(key)) return *v;
    if (key.is_string() && obj.is_dict()) {
      Value method = GetMethod(*this, obj, key.str());
      if (!method.is_undefined()) return method;
    }
    return Value::Undefined(fmt::format("'{} object' has no attribute {}", obj.TypeName(), key.Repr()));
  }
  if (obj.is_generator()) Fail("'generator' object is not subscriptable");
  if ((obj.is_sequence_like() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_string()) {
      std::vector<std::string> chars = SplitCodepoints(obj.str());
      int64_t n = static_cast<int64_t>(chars.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined(fmt::format("str object has no element {}", key.as_int()));
      return Value(chars[static_cast<size_t>(i)]);
    }
    int64_t n = static_cast<int64_t>(obj.list().size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) {
      return Value::Undefined(fmt::format("{} object has no element {}", obj.TypeName(), key.as_int()));
    }
    return obj.list()[static_cast<size_t>(i)];
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  return Value::Undefined(fmt::format("'{} object' has no element {}", obj.TypeName(), key.Repr()));
}

// ---------------------------------------------------------------------------------------------
// Template

struct Template::Impl {
  Body body;
  TemplateOptions options;
};

Template::Template(std::string_view source, TemplateOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  try {
    impl_->body = Parse(source, LexOptions{impl_->options.trim_blocks, impl_->options.lstrip_blocks});
  } catch (const TemplateError&) {
    throw;
  } catch (const Error& e) {
    throw TemplateError(e.what(), false);
  }
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::Render(const Value& context) const {
  Interpreter interp(impl_->options);
  return interp.Render(impl_->body, context);
}

std::string Template::Render(const nlohmann::ordered_json& context) const {
  Value ctx;
  try {
    ctx = Value::FromJson(context);
  } catch (const Error& e) {
    throw TemplateError(e.what(), false);
  }
  return Render(ctx);
}

}  // namespace pg::jinja
