// Tokens of the .kiln language and the hand-written lexer that produces them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "source.h"

namespace kiln::frontend {

enum class Tok : uint8_t {
  End,
  Ident,
  Int,
  Float,
  String,
  // Reserved words.
  KwFunc,
  KwParam,
  KwConstraint,
  KwInput,
  KwOutput,
  KwTemp,
  KwKnob,
  KwOption,
  KwCompute,
  KwSchedule,
  KwIn,
  KwAnd,
  KwOr,
  KwNot,
  KwTrue,
  KwFalse,
  // Punctuation.
  Le,
  Lt,
  Ge,
  Gt,
  EqEq,
  Ne,
  AndAnd,
  OrOr,
  Bang,
  Plus,
  Minus,
  Star,
  Slash,
  Percent,
  Assign,
  PlusAssign,
  MinusAssign,
  StarAssign,
  LParen,
  RParen,
  LBracket,
  RBracket,
  LBrace,
  RBrace,
  Comma,
  Semi,
  Colon,
  Dot,
};

struct Token {
  Tok kind = Tok::End;
  Pos pos;
  size_t end = 0;          // offset one past the token's last byte
  std::string_view text;   // the token as written (empty for End)
  int64_t int_value = 0;   // Int
  double float_value = 0;  // Float
  std::string str;         // String, escapes resolved
};

// How a message names a token: 'text' in quotes, or "end of file".
std::string describe(const Token& t);

// How a message names a token kind that was expected: "']'", "a name", ...
const char* spelling(Tok kind);

// Splits the source into tokens; the last one is End. Throws CompileError
// (stage "parse") for a character that starts no token, a malformed number,
// an unterminated string.
std::vector<Token> lex(const Source& src);

}  // namespace kiln::frontend
