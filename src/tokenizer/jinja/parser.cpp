#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <charconv>

#include "core/status.h"
#include "tokenizer/jinja/interpreter.h"

namespace pg::jinja {
namespace {

ExprPtr MakeExpr(ExprKind kind, SourcePos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body ParseTemplate() {
    std::string found;
    Body body = ParseBody({}, &found, {1, 1}, "");
    if (!unknown_.empty()) Fail(unknown_[0].first, unknown_[0].second);
    return body;
  }

 private:
  const Token& Cur() const { return toks_[p_]; }
  const Token& Peek(size_t ahead = 1) const { return toks_[std::min(p_ + ahead, toks_.size() - 1)]; }
  bool IsOp(std::string_view op) const { return Cur().kind == TokenKind::kOp && Cur().value == op; }
  bool IsName(std::string_view name) const { return Cur().kind == TokenKind::kName && Cur().value == name; }
  const Token& Next() { return toks_[p_ < toks_.size() - 1 ? p_++ : p_]; }

  [[noreturn]] void Fail(const SourcePos& pos, const std::string& message) const {
    Throw(ErrorCode::kInvalidArgument, "chat template syntax error at {}: {}", FormatPos(pos), message);
  }

  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEof: return "end of template";
      case TokenKind::kVarEnd: return "end of print statement '}}'";
      case TokenKind::kBlockEnd: return "end of statement block '%}'";
      case TokenKind::kText: return "template text";
      case TokenKind::kString: return "string literal";
      default: return "'" + t.value + "'";
    }
  }

  void ExpectOp(std::string_view op) {
    if (!IsOp(op)) Fail(Cur().pos, fmt::format("expected '{}', got {}", op, Describe(Cur())));
    Next();
  }
  void ExpectBlockEnd() {
    if (Cur().kind != TokenKind::kBlockEnd) Fail(Cur().pos, fmt::format("expected end of statement block '%}}', got {}", Describe(Cur())));
    Next();
  }
  std::string ExpectName() {
    if (Cur().kind != TokenKind::kName) Fail(Cur().pos, fmt::format("expected a name, got {}", Describe(Cur())));
    return Next().value;
  }

  // Parses statements until a block tag whose name is in `end_tags`; consumes `{%` and the
  // tag name and returns it in *found (the caller parses the rest of that tag).
  Body ParseBody(const std::vector<std::string>& end_tags, std::string* found, SourcePos opened_at,
                 const std::string& opened_tag) {
    Body body;
    while (true) {
      const Token& t = Cur();
      if (t.kind == TokenKind::kEof) {
        if (end_tags.empty()) return body;
        std::string expected;
        for (const auto& e : end_tags) expected += (expected.empty() ? "'" : " or '") + e + "'";
        Fail(t.pos, fmt::format("unexpected end of template: '{}' opened at {} was never closed "
                                "(expected {})", opened_tag, FormatPos(opened_at), expected));
      }
      if (t.kind == TokenKind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->pos = t.pos;
        s->text = t.value;
        body.push_back(std::move(s));
        Next();
      } else if (t.kind == TokenKind::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->pos = t.pos;
        Next();
        s->expr = ParseTuple(true);
        if (Cur().kind != TokenKind::kVarEnd) Fail(Cur().pos, fmt::format("unexpected {} in print statement", Describe(Cur())));
        Next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        SourcePos pos = t.pos;
        Next();
        if (Cur().kind != TokenKind::kName) Fail(Cur().pos, "expected a tag name after '{%'");
        std::string tag = Cur().value;
        for (const auto& e : end_tags) {
          if (e == tag) {
            Next();
            *found = tag;
            return body;
          }
        }
        Next();
        ParseStatement(tag, pos, body);
      } else {
        Fail(t.pos, fmt::format("unexpected {}", Describe(t)));
      }
    }
  }

  void ParseStatement(const std::string& tag, SourcePos pos, Body& out) {
    DepthGuard guard(this, pos);
    auto s = std::make_unique<Stmt>();
    s->pos = pos;
    std::string found;
    if (tag == "if") {
      SoftScope soft(this, true);
      s->kind = StmtKind::kIf;
      ExprPtr cond = ParseExpression(true);
      ExpectBlockEnd();
      while (true) {
        Body b = ParseBody({"elif", "else", "endif"}, &found, pos, "if");
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (found == "elif") {
          cond = ParseExpression(true);
          ExpectBlockEnd();
          continue;
        }
        ExpectBlockEnd();
        if (found == "else") {
          s->else_body = ParseBody({"endif"}, &found, pos, "if");
          ExpectBlockEnd();
        }
        break;
      }
    } else if (tag == "for") {
      s->kind = StmtKind::kFor;
      ParseTargets(s.get());
      if (!IsName("in")) Fail(Cur().pos, fmt::format("expected 'in' in for loop, got {}", Describe(Cur())));
      Next();
      s->expr = ParseTuple(false);
      if (IsName("if")) {
        Next();
        s->filter = ParseExpression(true);
      }
      if (IsName("recursive")) Fail(Cur().pos, "recursive for loops are not supported");
      ExpectBlockEnd();
      SoftScope not_soft(this, false);
      s->body = ParseBody({"else", "endfor"}, &found, pos, "for");
      ExpectBlockEnd();
      if (found == "else") {
        s->else_body = ParseBody({"endfor"}, &found, pos, "for");
        ExpectBlockEnd();
      }
    } else if (tag == "set") {
      s->kind = StmtKind::kSet;
      ParseTargets(s.get());
      if (IsOp("=")) {
        Next();
        s->expr = ParseTuple(true);
        ExpectBlockEnd();
      } else {
        if (s->target_is_tuple) Fail(pos, "block set needs a single target");
        ExpectBlockEnd();
        SoftScope not_soft(this, false);
        s->body = ParseBody({"endset"}, &found, pos, "set");
        ExpectBlockEnd();
      }
    } else if (tag == "macro") {
      s->kind = StmtKind::kMacro;
      s->name = ExpectName();
      ParseParams(s.get());
      ExpectBlockEnd();
      SoftScope not_soft(this, false);
      s->body = ParseBody({"endmacro"}, &found, pos, "macro");
      if (Cur().kind == TokenKind::kName) Next();  // {% endmacro name %}
      ExpectBlockEnd();
    } else if (tag == "call") {
      s->kind = StmtKind::kCallBlock;
      if (IsOp("(")) ParseParams(s.get());
      s->expr = ParseExpression(true);
      if (s->expr->kind != ExprKind::kCall) Fail(pos, "expected a call after 'call'");
      ExpectBlockEnd();
      SoftScope not_soft(this, false);
      s->body = ParseBody({"endcall"}, &found, pos, "call");
      ExpectBlockEnd();
    } else if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      ExprPtr chain;  // operand of the innermost filter stays null: the body text goes there
      do {
        if (IsOp("|")) Next();
        chain = ParseFilter(std::move(chain));
      } while (IsOp("|"));
      s->expr = std::move(chain);
      ExpectBlockEnd();
      SoftScope not_soft(this, false);
      s->body = ParseBody({"endfilter"}, &found, pos, "filter");
      ExpectBlockEnd();
    } else if (tag == "break" || tag == "continue") {
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      ExpectBlockEnd();
    } else if (tag == "generation") {  // HF AssistantTracker: renders its body unchanged
      ExpectBlockEnd();
      Body b = ParseBody({"endgeneration"}, &found, pos, "generation");
      ExpectBlockEnd();
      for (auto& st : b) out.push_back(std::move(st));
      return;
    } else {
      Fail(pos, fmt::format("unknown tag '{}'", tag));
    }
    out.push_back(std::move(s));
  }

  void ParseTargets(Stmt* s) {
    while (true) {
      SourcePos pos = Cur().pos;
      Target t;
      bool parens = IsOp("(");
      if (parens) Fail(pos, "nested tuple targets are not supported");
      t.name = ExpectName();
      if (IsOp(".")) {
        Next();
        t.attr = ExpectName();
      }
      s->targets.push_back(std::move(t));
      if (!IsOp(",")) break;
      s->target_is_tuple = true;
      Next();
      if (IsName("in") || IsOp("=")) break;
    }
  }

  void ParseParams(Stmt* s) {
    ExpectOp("(");
    while (!IsOp(")")) {
      MacroParam p;
      p.name = ExpectName();
      if (IsOp("=")) {
        Next();
        p.default_value = ParseExpression(true);
      }
      s->params.push_back(std::move(p));
      if (!IsOp(",")) break;
      Next();
    }
    ExpectOp(")");
  }

  // ---- expressions ----

  ExprPtr ParseTuple(bool with_condexpr) {
    SourcePos pos = Cur().pos;
    ExprPtr first = ParseExpression(with_condexpr);
    if (!IsOp(",")) return first;
    auto t = MakeExpr(ExprKind::kTuple, pos);
    t->args.push_back(std::move(first));
    while (IsOp(",")) {
      Next();
      if (Cur().kind == TokenKind::kVarEnd || Cur().kind == TokenKind::kBlockEnd || IsOp(")") || IsName("if")) break;
      t->args.push_back(ParseExpression(with_condexpr));
    }
    return Finish(std::move(t));
  }

  ExprPtr ParseExpression(bool with_condexpr) {
    DepthGuard guard(this, Cur().pos);
    return with_condexpr ? ParseCondExpr() : ParseOr();
  }

  ExprPtr ParseCondExpr() {
    size_t unknown_before = unknown_.size();
    ExprPtr expr = ParseOr();
    while (IsName("if")) {
      unknown_.resize(std::min(unknown_.size(), unknown_before));  // the branch turned out soft
      SoftScope soft(this, true);
      SourcePos pos = Cur().pos;
      Next();
      auto c = MakeExpr(ExprKind::kCondExpr, pos);
      c->args.push_back(ParseOr());
      c->args.push_back(std::move(expr));
      if (IsName("else")) {
        DepthGuard guard(this, Next().pos);
        c->args.push_back(ParseCondExpr());
      } else {
        c->args.push_back(nullptr);
      }
      expr = Finish(std::move(c));
    }
    return expr;
  }

  ExprPtr Binary(std::string op, ExprPtr a, ExprPtr b, SourcePos pos) {
    auto e = MakeExpr(ExprKind::kBinary, pos);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return Finish(std::move(e));
  }

  ExprPtr ParseOr() {
    ExprPtr e = ParseAnd();
    while (IsName("or")) {
      SourcePos pos = Next().pos;
      e = Binary("or", std::move(e), ParseAnd(), pos);
    }
    return e;
  }
  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (IsName("and")) {
      SourcePos pos = Next().pos;
      e = Binary("and", std::move(e), ParseNot(), pos);
    }
    return e;
  }
  ExprPtr ParseNot() {
    DepthGuard guard(this, Cur().pos);
    if (IsName("not")) {
      auto e = MakeExpr(ExprKind::kUnary, Next().pos);
      e->name = "not";
      e->args.push_back(ParseNot());
      return Finish(std::move(e));
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    ExprPtr e = ParseAdd();
    while (true) {
      SourcePos pos = Cur().pos;
      std::string op;
      if (Cur().kind == TokenKind::kOp &&
          (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">="))) {
        op = Next().value;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && Peek().kind == TokenKind::kName && Peek().value == "in") {
        Next();
        Next();
        op = "notin";
      } else {
        return e;
      }
      e = Binary(op, std::move(e), ParseAdd(), pos);
    }
  }
  ExprPtr ParseAdd() {
    ExprPtr e = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token& t = Next();
      e = Binary(t.value, std::move(e), ParseConcat(), t.pos);
    }
    return e;
  }
  ExprPtr ParseConcat() {
    ExprPtr e = ParseMul();
    while (IsOp("~")) {
      SourcePos pos = Next().pos;
      e = Binary("~", std::move(e), ParseMul(), pos);
    }
    return e;
  }
  ExprPtr ParseMul() {
    ExprPtr e = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& t = Next();
      e = Binary(t.value, std::move(e), ParsePow(), t.pos);
    }
    return e;
  }
  ExprPtr ParsePow() {
    ExprPtr e = ParseUnary(true);
    while (IsOp("**")) {
      SourcePos pos = Next().pos;
      e = Binary("**", std::move(e), ParseUnary(true), pos);
    }
    return e;
  }
  ExprPtr ParseUnary(bool with_filter) {
    DepthGuard guard(this, Cur().pos);
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      const Token& t = Next();
      e = MakeExpr(ExprKind::kUnary, t.pos);
      e->name = t.value;
      e->args.push_back(ParseUnary(false));
      e = Finish(std::move(e));
    } else {
      e = ParsePrimary();
    }
    e = ParsePostfix(std::move(e));
    if (with_filter) e = ParseFilterExpr(std::move(e));
    return e;
  }

  ExprPtr ParsePrimary() {
    const Token& t = Cur();
    SourcePos pos = t.pos;
    switch (t.kind) {
      case TokenKind::kName: {
        Next();
        auto e = MakeExpr(ExprKind::kLiteral, pos);
        if (t.value == "true" || t.value == "True") e->literal = Value(true);
        else if (t.value == "false" || t.value == "False") e->literal = Value(false);
        else if (t.value == "none" || t.value == "None") e->literal = Value::None();
        else {
          e->kind = ExprKind::kName;
          e->name = t.value;
        }
        return e;
      }
      case TokenKind::kString: {
        std::string s;
        while (Cur().kind == TokenKind::kString) s += Next().value;  // adjacent literals join
        auto e = MakeExpr(ExprKind::kLiteral, pos);
        e->literal = Value(std::move(s));
        return e;
      }
      case TokenKind::kInt: {
        Next();
        int64_t v = 0;
        auto r = std::from_chars(t.value.data(), t.value.data() + t.value.size(), v);
        if (r.ec != std::errc()) Fail(pos, "integer literal out of range");
        auto e = MakeExpr(ExprKind::kLiteral, pos);
        e->literal = Value(v);
        return e;
      }
      case TokenKind::kFloat: {
        Next();
        auto e = MakeExpr(ExprKind::kLiteral, pos);
        e->literal = Value(std::strtod(t.value.c_str(), nullptr));  // overflow gives inf, as Python
        return e;
      }
      case TokenKind::kOp: {
        if (t.value == "(") {
          Next();
          if (IsOp(")")) {
            Next();
            return MakeExpr(ExprKind::kTuple, pos);
          }
          ExprPtr first = ParseExpression(true);
          if (IsOp(",")) {
            auto tup = MakeExpr(ExprKind::kTuple, pos);
            tup->args.push_back(std::move(first));
            while (IsOp(",")) {
              Next();
              if (IsOp(")")) break;
              tup->args.push_back(ParseExpression(true));
            }
            first = Finish(std::move(tup));
          }
          ExpectOp(")");
          return first;
        }
        if (t.value == "[") {
          Next();
          auto e = MakeExpr(ExprKind::kList, pos);
          while (!IsOp("]")) {
            e->args.push_back(ParseExpression(true));
            if (!IsOp(",")) break;
            Next();
          }
          ExpectOp("]");
          return Finish(std::move(e));
        }
        if (t.value == "{") {
          Next();
          auto e = MakeExpr(ExprKind::kDict, pos);
          while (!IsOp("}")) {
            e->args.push_back(ParseExpression(true));
            ExpectOp(":");
            e->args.push_back(ParseExpression(true));
            if (!IsOp(",")) break;
            Next();
          }
          ExpectOp("}");
          return Finish(std::move(e));
        }
        break;
      }
      default: break;
    }
    Fail(pos, fmt::format("unexpected {}", Describe(t)));
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    while (true) {
      if (IsOp(".")) {
        SourcePos pos = Next().pos;
        if (Cur().kind == TokenKind::kInt) {
          auto idx = MakeExpr(ExprKind::kLiteral, Cur().pos);
          int64_t index = 0;
          const std::string& digits = Next().value;
          if (std::from_chars(digits.data(), digits.data() + digits.size(), index).ec != std::errc()) {
            Fail(pos, "index out of range");
          }
          idx->literal = Value(index);
          auto g = MakeExpr(ExprKind::kGetItem, pos);
          g->args.push_back(std::move(e));
          g->args.push_back(std::move(idx));
          e = Finish(std::move(g));
          continue;
        }
        auto g = MakeExpr(ExprKind::kGetAttr, pos);
        g->name = ExpectName();
        g->args.push_back(std::move(e));
        e = Finish(std::move(g));
      } else if (IsOp("[")) {
        e = ParseSubscript(std::move(e));
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr obj) {
    SourcePos pos = Next().pos;  // '['
    ExprPtr parts[3];
    bool is_slice = false;
    int part = 0;
    while (true) {
      if (IsOp(":")) {
        is_slice = true;
        if (++part > 2) Fail(Cur().pos, "too many ':' in slice");
        Next();
        continue;
      }
      if (IsOp("]")) break;
      if (parts[part]) Fail(Cur().pos, fmt::format("unexpected {} in subscript", Describe(Cur())));
      parts[part] = ParseExpression(true);
    }
    ExpectOp("]");
    if (!is_slice) {
      if (!parts[0]) Fail(pos, "empty subscript");
      auto g = MakeExpr(ExprKind::kGetItem, pos);
      g->args.push_back(std::move(obj));
      g->args.push_back(std::move(parts[0]));
      return Finish(std::move(g));
    }
    auto s = MakeExpr(ExprKind::kSlice, pos);
    s->args.push_back(std::move(obj));
    for (auto& p : parts) s->args.push_back(std::move(p));
    return Finish(std::move(s));
  }

  // Parses `(args)` into e (args after those already in e->args).
  void ParseCallArgs(Expr* e) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (IsOp("*") || IsOp("**")) Fail(Cur().pos, "*args / **kwargs in calls are not supported");
      if (Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOp && Peek().value == "=") {
        std::string key = Next().value;
        Next();
        e->kwargs.emplace_back(std::move(key), ParseExpression(true));
      } else {
        if (!e->kwargs.empty()) Fail(Cur().pos, "positional argument follows keyword argument");
        e->args.push_back(ParseExpression(true));
      }
      if (!IsOp(",")) break;
      Next();
    }
    ExpectOp(")");
  }

  ExprPtr ParseCall(ExprPtr callee) {
    auto c = MakeExpr(ExprKind::kCall, Cur().pos);
    c->args.push_back(std::move(callee));
    ParseCallArgs(c.get());
    return Finish(std::move(c));
  }

  ExprPtr ParseFilter(ExprPtr operand) {
    auto f = MakeExpr(ExprKind::kFilter, Cur().pos);
    f->name = ExpectName();
    while (IsOp(".")) {  // dotted filter names
      Next();
      f->name += "." + ExpectName();
    }
    if (!HasFilter(f->name)) UnknownName(f->pos, fmt::format("no filter named '{}'", f->name));
    f->args.push_back(std::move(operand));
    if (IsOp("(")) ParseCallArgs(f.get());
    return Finish(std::move(f));
  }

  ExprPtr ParseFilterExpr(ExprPtr e) {
    while (true) {
      if (IsOp("|")) {
        Next();
        e = ParseFilter(std::move(e));
      } else if (IsName("is")) {
        auto t = MakeExpr(ExprKind::kTest, Next().pos);
        if (IsName("not")) {
          Next();
          t->negated = true;
        }
        SourcePos name_pos = Cur().pos;
        t->name = ExpectName();
        if (!HasTest(t->name)) UnknownName(name_pos, fmt::format("no test named '{}'", t->name));
        t->args.push_back(std::move(e));
        if (IsOp("(")) {
          ParseCallArgs(t.get());
        } else if ((Cur().kind == TokenKind::kName || Cur().kind == TokenKind::kString ||
                    Cur().kind == TokenKind::kInt || Cur().kind == TokenKind::kFloat || IsOp("[") ||
                    IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          if (IsName("is")) Fail(Cur().pos, "you cannot chain multiple tests with is");
          t->args.push_back(ParsePostfix(ParsePrimary()));
        }
        e = Finish(std::move(t));
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  // An unknown filter/test is a syntax error, except inside an if statement or inline if
  // (jinja2's "soft" frames), where it only fails if evaluated: templates guard optional
  // filters that way. Non-soft uses are collected here and reported after parsing.
  void UnknownName(SourcePos pos, std::string message) {
    if (soft_depth_ == 0) unknown_.emplace_back(pos, std::move(message));
  }
  // Scope guard: bodies of for/macro/call/filter/block-set are not soft even inside an if.
  // Sets e->depth from its children and bounds it: left-deep chains (a + b + c + ..., long
  // filter or attribute chains) are built by loops, not recursion, so DepthGuard misses them.
  static constexpr int kMaxTreeDepth = 512;
  ExprPtr Finish(ExprPtr e) {
    int d = 0;
    for (const auto& a : e->args) {
      if (a) d = std::max(d, a->depth);
    }
    for (const auto& [k, v] : e->kwargs) d = std::max(d, v->depth);
    e->depth = d + 1;
    if (e->depth > kMaxTreeDepth) Fail(e->pos, fmt::format("expression nested more than {} deep", kMaxTreeDepth));
    return e;
  }

  // Bounds recursion so hostile templates ("((((..." or deeply nested tags) fail cleanly
  // instead of overflowing the stack.
  static constexpr int kMaxNesting = 256;
  struct DepthGuard {
    Parser* p;
    DepthGuard(Parser* parser, SourcePos pos) : p(parser) {
      if (++p->nesting_ > kMaxNesting) {
        p->Fail(pos, fmt::format("expressions or blocks nested more than {} deep", kMaxNesting));
      }
    }
    ~DepthGuard() { --p->nesting_; }
  };

  struct SoftScope {
    Parser* p;
    int saved;
    SoftScope(Parser* parser, bool soft) : p(parser), saved(parser->soft_depth_) {
      p->soft_depth_ = soft ? saved + 1 : 0;
    }
    ~SoftScope() { p->soft_depth_ = saved; }
  };

  std::vector<Token> toks_;
  size_t p_ = 0;
  int soft_depth_ = 0;
  int nesting_ = 0;
  std::vector<std::pair<SourcePos, std::string>> unknown_;
};

}  // namespace

Body Parse(std::string_view source, const LexOptions& options) {
  return Parser(Lex(source, options)).ParseTemplate();
}

}  // namespace pg::jinja
