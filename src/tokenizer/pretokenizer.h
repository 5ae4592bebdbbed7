// Pre-tokenization: splits a text segment (no added tokens inside) into the pieces that BPE
// encodes one by one. A PreTokenizer is an ordered list of split steps, applied as HF
// tokenizers' pre_tokenizers.Sequence does: every step re-splits each piece of the previous
// step independently (a regex never sees across piece boundaries).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pg::tokenizer {

struct RegexMatchState;  // per-thread PCRE2 match data + JIT stack (pretokenizer.cpp)

// PCRE2 pattern compiled with UTF + UCP (Unicode \p{..}, \s, \w) and JIT. Immutable after
// construction; Find() is thread-safe (per-thread match data and JIT stack).
class Regex {
 public:
  // Throws pg::Error(kInvalidArgument) with PCRE2's message for a bad pattern.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Next match in subject at or after byte `start`. `subject` must be valid UTF-8 and `start`
  // a character boundary. Returns false when there is none.
  bool Find(std::string_view subject, size_t start, size_t* match_begin, size_t* match_end) const;
  // Same, with the calling thread's state fetched once by the caller (hot loops).
  bool Find(RegexMatchState& state, std::string_view subject, size_t start, size_t* match_begin,
            size_t* match_end) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

// The regexes the supported model families use (HF tokenizer.json spelling).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Digits(individual_digits) followed by the GPT-2 regex (HF SmolLM2), fused into one pass:
// a digit is always its own piece, and since the digit split ends a piece, `\s+(?!\S)` may
// take whitespace up to a digit (lookahead fails only on a non-space non-digit).
// tests/unit/tokenizer checks it piece for piece against the two-step split.
inline constexpr std::string_view kSmolLmFusedPattern =
    R"(\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+)";

// How a regex split treats its matches (HF SplitDelimiterBehavior). The byte-level families
// only use kIsolated: every match and every gap between matches becomes its own piece.
enum class SplitBehavior { kIsolated, kRemoved };

struct PreTokenizeStep {
  std::shared_ptr<const Regex> regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
};

// A piece: [begin, end) byte offsets into the segment passed to Split().
struct Piece {
  uint32_t begin;
  uint32_t end;
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizeStep> steps) : steps_(std::move(steps)) {}

  // Replaces *pieces with the pieces of `text` (valid UTF-8, < 4 GiB), in order, covering it
  // except for kRemoved matches. `scratch` is reused between calls to avoid allocation.
  void Split(std::string_view text, std::vector<Piece>* pieces, std::vector<Piece>* scratch) const;

  bool empty() const { return steps_.empty(); }
  const std::vector<PreTokenizeStep>& steps() const { return steps_; }

 private:
  std::vector<PreTokenizeStep> steps_;
};

// Steps for a named family, as in GGUF's tokenizer.ggml.pre: "gpt2", "smollm" (HF SmolLM2:
// Digits(individual_digits) then the GPT-2 regex), "llama-bpe"/"llama3", "qwen2".
// Throws pg::Error(kUnsupported) naming the supported values for anything else.
std::vector<PreTokenizeStep> PreTokenizeStepsForFamily(std::string_view pre);

}  // namespace pg::tokenizer
