// Parser: token stream -> syntax tree. Grammar and precedence follow jinja2's parser:
//   condexpr: or ['if' or ['else' condexpr]]       or: and ('or' and)*     and: not ('and' not)*
//   not: 'not' not | compare                         compare: add (cmp_op add)*
//   add: concat (('+'|'-') concat)*                  concat: mul ('~' mul)*
//   mul: pow (('*'|'/'|'//'|'%') pow)*               pow: unary ('**' unary)*
//   unary: ('-'|'+') unary_nofilter | primary postfix* (('|' filter) | ('is' test) | call)*
// Statements: if/elif/else, for (targets, filter, else), set (incl. namespace attr, tuples,
// block set), macro, call, filter, break/continue, and HF's generation/endgeneration.
#pragma once

#include <string_view>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace pg::jinja {

// Throws pg::Error "chat template syntax error at line L, column C: ..." on bad syntax.
Body Parse(std::string_view source, const LexOptions& options);

}  // namespace pg::jinja
