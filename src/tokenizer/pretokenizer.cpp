#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/status.h"

namespace pg::tokenizer {

// Per-thread PCRE2 state: match data with one ovector pair (all we read) and a JIT stack
// large enough for long runs of whitespace under a lookahead.
struct RegexMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  RegexMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    PG_CHECK(data && context && jit_stack, "pcre2 allocation failed");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~RegexMatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

namespace {

RegexMatchState& MatchState() {
  thread_local RegexMatchState state;
  return state;
}

}  // namespace

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    Throw(ErrorCode::kInvalidArgument, "bad pre-tokenizer regex at offset {}: {} (pattern: {})",
          error_offset, reinterpret_cast<const char*>(message), pattern_);
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::Find(std::string_view subject, size_t start, size_t* match_begin,
                 size_t* match_end) const {
  return Find(MatchState(), subject, start, match_begin, match_end);
}

bool Regex::Find(RegexMatchState& st, std::string_view subject, size_t start,
                 size_t* match_begin, size_t* match_end) const {
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const int rc = jit_ ? pcre2_jit_match(code, s, subject.size(), start, 0, st.data, st.context)
                      : pcre2_match(code, s, subject.size(), start, PCRE2_NO_UTF_CHECK, st.data,
                                    st.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof(message));
    Throw(ErrorCode::kInternal, "pre-tokenizer regex match failed: {}",
          reinterpret_cast<const char*>(message));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(st.data);
  *match_begin = ovector[0];
  *match_end = ovector[1];
  return true;
}

void PreTokenizer::Split(std::string_view text, std::vector<Piece>* pieces,
                         std::vector<Piece>* scratch) const {
  PG_CHECK(text.size() < (size_t{1} << 32), "segment too large: {}", text.size());
  pieces->clear();
  if (text.empty()) return;
  pieces->push_back({0, static_cast<uint32_t>(text.size())});
  RegexMatchState& state = MatchState();
  for (const PreTokenizeStep& step : steps_) {
    scratch->clear();
    for (const Piece& piece : *pieces) {
      const std::string_view sub = text.substr(piece.begin, piece.end - piece.begin);
      size_t pos = 0;     // start of the not yet emitted rest of the piece
      size_t search = 0;  // where the next match may start
      size_t mb, me;
      while (search <= sub.size() && step.regex->Find(state, sub, search, &mb, &me)) {
        if (mb > pos) scratch->push_back({piece.begin + uint32_t(pos), piece.begin + uint32_t(mb)});
        if (me > mb) {
          if (step.behavior == SplitBehavior::kIsolated)
            scratch->push_back({piece.begin + uint32_t(mb), piece.begin + uint32_t(me)});
          pos = search = me;
        } else {
          // An empty match is only a split point; resume after the next character.
          pos = mb;
          search = mb + 1;
          while (search < sub.size() && (static_cast<uint8_t>(sub[search]) & 0xC0) == 0x80) ++search;
        }
      }
      if (pos < sub.size()) scratch->push_back({piece.begin + uint32_t(pos), piece.end});
    }
    pieces->swap(*scratch);
  }
}

std::vector<PreTokenizeStep> PreTokenizeStepsForFamily(std::string_view pre) {
  auto step = [](std::string_view pattern) {
    return PreTokenizeStep{std::make_shared<const Regex>(pattern), SplitBehavior::kIsolated};
  };
  if (pre == "gpt2" || pre == "default") return {step(kGpt2Pattern)};
  // HF SmolLM2 / StarCoder: Digits(individual_digits=true) isolates every \p{N} character,
  // then ByteLevel(use_regex=true) applies the GPT-2 regex to each piece.
  if (pre == "smollm" || pre == "starcoder") return {step(kSmolLmFusedPattern)};
  if (pre == "llama-bpe" || pre == "llama3") return {step(kLlama3Pattern)};
  if (pre == "qwen2") return {step(kQwen2Pattern)};
  Throw(ErrorCode::kUnsupported,
        "unknown tokenizer pre-tokenizer '{}' (supported: gpt2, default, smollm, starcoder, "
        "llama-bpe, llama3, qwen2)",
        pre);
}

}  // namespace pg::tokenizer
