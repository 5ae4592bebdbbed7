// JSON (RFC 8259) as a GBNF grammar, written for Peregrine's tests and benchmarks
// (runtime/grammar.h): any JSON text, surrounding whitespace allowed.
#pragma once

namespace pg::runtime {

inline constexpr const char* kJsonGbnf = R"(# JSON (RFC 8259)
root    ::= ws value ws
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member  ::= string ws ":" ws value
array   ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string  ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number  ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws      ::= [ \t\n\r]*
)";

}  // namespace pg::runtime
