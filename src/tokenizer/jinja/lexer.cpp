#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cctype>

#include "core/status.h"

namespace pg::jinja {

std::string FormatPos(const SourcePos& pos) {
  return fmt::format("line {}, column {}", pos.line, pos.column);
}

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string Normalize(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& options) : src_(std::move(src)), opt_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> Run() {
    size_t pos = 0;
    bool strip_next = false;     // previous tag ended with '-'
    bool line_starting = true;   // the last consumed tag ended a line
    while (pos < src_.size()) {
      size_t tag = FindTagStart(pos);
      size_t text_end = tag == std::string::npos ? src_.size() : tag;
      std::string text = src_.substr(pos, text_end - pos);
      SourcePos text_pos = PosOf(pos);
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && IsSpace(text[k])) ++k;
        text.erase(0, k);
        strip_next = false;
      }
      if (tag == std::string::npos) {
        Emit(TokenKind::kText, std::move(text), text_pos);
        break;
      }
      char type = src_[tag + 1];  // '{', '%' or '#'
      char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier == '-') {
        size_t k = text.size();
        while (k > 0 && IsSpace(text[k - 1])) --k;
        text.resize(k);
      } else if (modifier != '+' && opt_.lstrip_blocks && type != '{') {
        size_t l = text.rfind('\n');
        l = l == std::string::npos ? 0 : l + 1;
        if (l > 0 || line_starting) {
          bool all_ws = l < text.size() &&
                        std::all_of(text.begin() + l, text.end(), [](char c) { return IsSpace(c); });
          if (all_ws) text.resize(l);
        }
      }
      Emit(TokenKind::kText, std::move(text), text_pos);
      size_t body = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      size_t after;
      char end_modifier = '\0';
      if (type == '#') {
        size_t close = src_.find("#}", body);
        if (close == std::string::npos) Fail(tag, "unclosed comment (missing '#}')");
        if (close > body && src_[close - 1] == '-') end_modifier = '-';
        if (close > body && src_[close - 1] == '+') end_modifier = '+';
        after = close + 2;
      } else if (type == '%' && IsRawBlock(body)) {
        after = LexRaw(tag, body, &end_modifier);
      } else {
        after = LexTag(tag, type, body, &end_modifier);
      }
      if (end_modifier == '-') {
        strip_next = true;
      } else if (end_modifier != '+' && type != '{' && opt_.trim_blocks && after < src_.size() &&
                 src_[after] == '\n') {
        ++after;
      }
      line_starting = after > 0 && src_[after - 1] == '\n';
      pos = after;
    }
    tokens_.push_back({TokenKind::kEof, "", PosOf(src_.size())});
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  SourcePos PosOf(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    return {static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1] + 1)};
  }

  [[noreturn]] void Fail(size_t offset, const std::string& message) const {
    Throw(ErrorCode::kInvalidArgument, "chat template syntax error at {}: {}", FormatPos(PosOf(offset)),
          message);
  }

  void Emit(TokenKind kind, std::string value, SourcePos pos) {
    if (kind == TokenKind::kText && value.empty()) return;
    tokens_.push_back({kind, std::move(value), pos});
  }

  // `{% raw %}`: true when the block's first word is `raw`.
  bool IsRawBlock(size_t body) const {
    size_t i = body;
    while (i < src_.size() && IsSpace(src_[i])) ++i;
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    while (i < src_.size() && IsSpace(src_[i])) ++i;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    return src_.compare(i, 2, "%}") == 0;
  }

  size_t LexRaw(size_t tag, size_t body, char* end_modifier) {
    size_t open_end = src_.find("%}", body) + 2;
    bool strip_after_open = src_[open_end - 3] == '-';
    for (size_t i = src_.find("{%", open_end); i != std::string::npos; i = src_.find("{%", i + 2)) {
      size_t j = i + 2;
      bool strip_before_close = j < src_.size() && src_[j] == '-';
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) ++j;
      while (j < src_.size() && IsSpace(src_[j])) ++j;
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      while (j < src_.size() && IsSpace(src_[j])) ++j;
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) *end_modifier = src_[j++];
      if (src_.compare(j, 2, "%}") != 0) continue;
      std::string text = src_.substr(open_end, i - open_end);
      if (strip_after_open) text.erase(0, std::find_if(text.begin(), text.end(), [](char c) { return !IsSpace(c); }) - text.begin());
      if (strip_before_close) {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      }
      Emit(TokenKind::kText, std::move(text), PosOf(open_end));
      return j + 2;
    }
    Fail(tag, "unclosed raw block (missing '{% endraw %}')");
  }

  // Lexes expression tokens of a {{ }} or {% %} tag; returns the offset after the closer.
  size_t LexTag(size_t tag, char type, size_t i, char* end_modifier) {
    const char close = type == '{' ? '}' : '%';
    tokens_.push_back({type == '{' ? TokenKind::kVarBegin : TokenKind::kBlockBegin, "", PosOf(tag)});
    int depth = 0;  // open brackets: closers are not recognised inside them (as jinja2)
    while (true) {
      while (i < src_.size() && IsSpace(src_[i])) ++i;
      if (i >= src_.size()) Fail(tag, type == '{' ? "unclosed '{{' (missing '}}')" : "unclosed '{%' (missing '%}')");
      if (depth == 0) {
        size_t j = i;
        char mod = '\0';
        if (src_[j] == '-' || (src_[j] == '+' && type == '%')) mod = src_[j++];
        if (j + 1 < src_.size() && src_[j] == close && src_[j + 1] == '}') {
          tokens_.push_back({type == '{' ? TokenKind::kVarEnd : TokenKind::kBlockEnd, "", PosOf(i)});
          *end_modifier = mod;
          return j + 2;
        }
      }
      SourcePos pos = PosOf(i);
      char c = src_[i];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t j = i;
        while (j < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
        tokens_.push_back({TokenKind::kName, src_.substr(i, j - i), pos});
        i = j;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        i = LexNumber(i, pos);
      } else if (c == '\'' || c == '"') {
        i = LexString(i, pos);
      } else {
        static const char* kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* two : kTwo) {
          if (src_.compare(i, 2, two) == 0) op = two;
        }
        if (op.size() == 1 && std::string_view("+-*/%~()[]{},.:|=<>;!").find(c) == std::string_view::npos) {
          Fail(i, fmt::format("unexpected character '{}'", c));
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        tokens_.push_back({TokenKind::kOp, op, pos});
        i += op.size();
      }
    }
  }

  size_t LexNumber(size_t i, SourcePos pos) {
    size_t j = i;
    auto digits = [&] {
      while (j < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
    };
    digits();
    bool is_float = false;
    if (j + 1 < src_.size() && src_[j] == '.' && std::isdigit(static_cast<unsigned char>(src_[j + 1]))) {
      is_float = true;
      ++j;
      digits();
    }
    if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t k = j + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
        is_float = true;
        j = k;
        digits();
      }
    }
    std::string spelling;
    for (size_t k = i; k < j; ++k) {
      if (src_[k] != '_') spelling += src_[k];
    }
    tokens_.push_back({is_float ? TokenKind::kFloat : TokenKind::kInt, spelling, pos});
    return j;
  }

  size_t LexString(size_t i, SourcePos pos) {
    const char quote = src_[i];
    std::string out;
    size_t j = i + 1;
    while (true) {
      if (j >= src_.size()) Fail(i, "unterminated string literal");
      char c = src_[j];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++j;
        continue;
      }
      if (j + 1 >= src_.size()) Fail(i, "unterminated string literal");
      char e = src_[j + 1];
      j += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (j + n > src_.size()) Fail(j - 2, "truncated \\" + std::string(1, e) + " escape");
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            char h = src_[j + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) Fail(j - 2, "invalid hex escape in string");
            cp = cp * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          AppendUtf8(out, cp);
          j += n;
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
    tokens_.push_back({TokenKind::kString, std::move(out), pos});
    return j + 1;
  }

  std::string src_;
  LexOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Lex(std::string_view source, const LexOptions& options) {
  return Lexer(Normalize(source), options).Run();
}

}  // namespace pg::jinja
