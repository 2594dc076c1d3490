// The lexer: .kiln text to tokens, with positions, comments skipped.
#include "lexer.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

namespace kiln::frontend {

namespace {

struct Keyword {
  const char* word;
  Tok kind;
};
constexpr Keyword kKeywords[] = {
    {"func", Tok::KwFunc},
    {"param", Tok::KwParam},
    {"constraint", Tok::KwConstraint},
    {"input", Tok::KwInput},
    {"output", Tok::KwOutput},
    {"temp", Tok::KwTemp},
    {"knob", Tok::KwKnob},
    {"option", Tok::KwOption},
    {"compute", Tok::KwCompute},
    {"schedule", Tok::KwSchedule},
    {"in", Tok::KwIn},
    {"and", Tok::KwAnd},
    {"or", Tok::KwOr},
    {"not", Tok::KwNot},
    {"true", Tok::KwTrue},
    {"false", Tok::KwFalse},
};

struct Punct {
  const char* text;
  Tok kind;
};
// Longest first, so that "<=" wins over "<".
constexpr Punct kPuncts[] = {
    {"<=", Tok::Le},         {">=", Tok::Ge},          {"==", Tok::EqEq},
    {"!=", Tok::Ne},         {"&&", Tok::AndAnd},      {"||", Tok::OrOr},
    {"+=", Tok::PlusAssign}, {"-=", Tok::MinusAssign}, {"*=", Tok::StarAssign},
    {"<", Tok::Lt},          {">", Tok::Gt},           {"!", Tok::Bang},
    {"+", Tok::Plus},        {"-", Tok::Minus},        {"*", Tok::Star},
    {"/", Tok::Slash},       {"%", Tok::Percent},      {"=", Tok::Assign},
    {"(", Tok::LParen},      {")", Tok::RParen},       {"[", Tok::LBracket},
    {"]", Tok::RBracket},    {"{", Tok::LBrace},       {"}", Tok::RBrace},
    {",", Tok::Comma},       {";", Tok::Semi},         {":", Tok::Colon},
    {".", Tok::Dot},
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_alnum(char c) { return is_alpha(c) || is_digit(c); }

// A byte as a message shows it: 'c' when printable, otherwise its hex value.
std::string show_byte(char c) {
  auto u = static_cast<unsigned char>(c);
  if (u >= 0x21 && u < 0x7f) return std::string("'") + c + "'";
  char buf[16];
  std::snprintf(buf, sizeof buf, "byte 0x%02X", u);
  return buf;
}

class Lexer {
 public:
  explicit Lexer(const Source& src) : src_(src), text_(src.text()) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    for (;;) {
      skip_space_and_comments();
      Token t;
      t.pos = here();
      if (i_ >= text_.size()) {
        t.kind = Tok::End;
        t.end = i_;
        out.push_back(std::move(t));
        return out;
      }
      char c = text_[i_];
      if (is_alpha(c)) {
        lex_word(t);
      } else if (is_digit(c)) {
        lex_number(t);
      } else if (c == '"') {
        lex_string(t);
      } else {
        lex_punct(t);
      }
      t.end = i_;
      t.text = text_.substr(t.pos.offset, i_ - t.pos.offset);
      out.push_back(std::move(t));
    }
  }

 private:
  Pos here() const {
    return Pos{line_, static_cast<int>(std::min<size_t>(i_ - line_start_ + 1, 1u << 30)), i_};
  }

  [[noreturn]] void fail(Pos p, const std::string& msg) const { src_.parse_error(p, msg); }

  void newline() {
    ++line_;
    line_start_ = i_ + 1;
  }

  void skip_space_and_comments() {
    while (i_ < text_.size()) {
      char c = text_[i_];
      if (c == '\n') {
        newline();
        ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
        ++i_;
      } else if (c == '#' || (c == '/' && i_ + 1 < text_.size() && text_[i_ + 1] == '/')) {
        while (i_ < text_.size() && text_[i_] != '\n') ++i_;
      } else {
        return;
      }
    }
  }

  void lex_word(Token& t) {
    size_t b = i_;
    while (i_ < text_.size() && is_alnum(text_[i_])) ++i_;
    std::string_view w = text_.substr(b, i_ - b);
    t.kind = Tok::Ident;
    for (const Keyword& k : kKeywords) {
      if (w == k.word) t.kind = k.kind;
    }
  }

  void lex_number(Token& t) {
    size_t b = i_;
    bool is_float = false;
    while (i_ < text_.size() && is_digit(text_[i_])) ++i_;
    if (i_ < text_.size() && text_[i_] == '.') {
      if (i_ + 1 >= text_.size() || !is_digit(text_[i_ + 1])) {
        fail(t.pos, "expected a digit after '.' in the number '" +
                        std::string(text_.substr(b, i_ + 1 - b)) + "'");
      }
      is_float = true;
      ++i_;
      while (i_ < text_.size() && is_digit(text_[i_])) ++i_;
    }
    if (i_ < text_.size() && (text_[i_] == 'e' || text_[i_] == 'E')) {
      size_t j = i_ + 1;
      if (j < text_.size() && (text_[j] == '+' || text_[j] == '-')) ++j;
      if (j >= text_.size() || !is_digit(text_[j])) {
        fail(t.pos, "expected digits in the exponent of the number '" +
                        std::string(text_.substr(b, j - b)) + "'");
      }
      is_float = true;
      i_ = j;
      while (i_ < text_.size() && is_digit(text_[i_])) ++i_;
    }
    if (i_ < text_.size() && (is_alpha(text_[i_]) || text_[i_] == '.')) {
      size_t e = i_;
      while (e < text_.size() && (is_alnum(text_[e]) || text_[e] == '.')) ++e;
      fail(t.pos,
           "invalid number '" + std::string(text_.substr(b, std::min<size_t>(e - b, 40))) + "'");
    }
    std::string_view s = text_.substr(b, i_ - b);
    if (is_float) {
      t.kind = Tok::Float;
      auto r = std::from_chars(s.data(), s.data() + s.size(), t.float_value);
      if (r.ec != std::errc() || !std::isfinite(t.float_value)) {
        fail(t.pos, "float literal '" + std::string(s) + "' is out of range");
      }
    } else {
      t.kind = Tok::Int;
      auto r = std::from_chars(s.data(), s.data() + s.size(), t.int_value);
      if (r.ec != std::errc()) {
        fail(t.pos, "integer literal '" + std::string(s.substr(0, 40)) +
                        "' is too large (the largest is 9223372036854775807)");
      }
    }
  }

  void lex_string(Token& t) {
    t.kind = Tok::String;
    ++i_;  // the opening quote
    for (;;) {
      if (i_ >= text_.size() || text_[i_] == '\n') {
        fail(t.pos, "unterminated string: a string ends with '\"' on the line it starts");
      }
      char c = text_[i_];
      if (c == '"') {
        ++i_;
        return;
      }
      if (c == '\\') {
        Pos esc = here();
        char n = i_ + 1 < text_.size() ? text_[i_ + 1] : '\0';
        switch (n) {
          case '"':
          case '\\':
            t.str += n;
            break;
          case 'n':
            t.str += '\n';
            break;
          case 't':
            t.str += '\t';
            break;
          default:
            fail(esc, "unknown escape in string: '\\' followed by " + show_byte(n) +
                          " (known: \\\" \\\\ \\n \\t)");
        }
        i_ += 2;
        continue;
      }
      t.str += c;
      ++i_;
    }
  }

  void lex_punct(Token& t) {
    std::string_view rest = text_.substr(i_);
    for (const Punct& p : kPuncts) {
      std::string_view s(p.text);
      if (rest.substr(0, s.size()) == s) {
        t.kind = p.kind;
        i_ += s.size();
        return;
      }
    }
    char c = text_[i_];
    if (c == '&') fail(t.pos, "unexpected character '&' (did you mean '&&' or 'and'?)");
    if (c == '|') fail(t.pos, "unexpected character '|' (did you mean '||' or 'or'?)");
    if (c == '\'') fail(t.pos, "unexpected character ''' (strings use double quotes)");
    auto u = static_cast<unsigned char>(c);
    if (u < 0x21 || u >= 0x7f) {
      fail(t.pos,
           "unexpected " + show_byte(c) + " (outside comments and strings, .kiln source is ASCII)");
    }
    fail(t.pos, "unexpected character " + show_byte(c));
  }

  const Source& src_;
  std::string_view text_;
  size_t i_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
};

}  // namespace

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::End:
      return "end of file";
    case Tok::String: {
      std::string s(t.text);
      if (s.size() > 30) s = s.substr(0, 27) + "...\"";
      return "string " + s;
    }
    default: {
      std::string s(t.text);
      if (s.size() > 30) s = s.substr(0, 27) + "...";
      return "'" + s + "'";
    }
  }
}

const char* spelling(Tok kind) {
  switch (kind) {
    case Tok::End:
      return "end of file";
    case Tok::Ident:
      return "a name";
    case Tok::Int:
      return "an integer";
    case Tok::Float:
      return "a number";
    case Tok::String:
      return "a string";
    default:
      break;
  }
  for (const Keyword& k : kKeywords) {
    if (k.kind == kind) return k.word;
  }
  for (const Punct& p : kPuncts) {
    if (p.kind == kind) return p.text;
  }
  return "?";
}

std::vector<Token> lex(const Source& src) { return Lexer(src).run(); }

std::string Source::quote(size_t begin, size_t end, size_t limit) const {
  std::string out;
  end = std::min(end, text_.size());
  bool blank = false;
  for (size_t i = begin; i < end; ++i) {
    char c = text_[i];
    if (c == '#' || (c == '/' && i + 1 < end && text_[i + 1] == '/')) {
      while (i + 1 < end && text_[i + 1] != '\n') ++i;
      blank = !out.empty();
      continue;
    }
    bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
    if (space) {
      blank = !out.empty();
      continue;
    }
    if (blank) out += ' ';
    blank = false;
    out += c;
  }
  if (out.size() > limit) out = out.substr(0, limit - 3) + "...";
  return out;
}

}  // namespace kiln::frontend
