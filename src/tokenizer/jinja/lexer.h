// Lexer: template source -> token stream (text, tag delimiters, expression tokens).
// Implements jinja2's whitespace rules: `-` strips all whitespace on that side of a tag,
// trim_blocks drops the first newline after a block/comment tag, lstrip_blocks strips spaces
// and tabs before a block/comment tag that starts a line, `+` opts out of either; one trailing
// newline of the source is dropped (keep_trailing_newline=False); newlines are normalised to \n.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"

namespace pg::jinja {

enum class TokenKind {
  kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd,
  kName, kString, kInt, kFloat, kOp, kEof,
};

struct Token {
  TokenKind kind;
  std::string value;  // text, name, decoded string literal, operator, number spelling
  SourcePos pos;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws pg::Error("... line L, column C ...") on malformed input (unclosed tag or string).
std::vector<Token> Lex(std::string_view source, const LexOptions& options);

// Formats the error prefix used by the lexer, parser and interpreter.
std::string FormatPos(const SourcePos& pos);

}  // namespace pg::jinja
