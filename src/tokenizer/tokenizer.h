// Byte-level BPE tokenizer (GPT-2, SmolLM2, Llama-3, Qwen2/3 families), loaded from an HF
// tokenizer.json or from GGUF metadata, with added/special tokens, and decoding.
//
// Encode pipeline (HF tokenizers' order): split on added tokens that match the raw text
// (leftmost, longest first) -> normalize the rest (NFC for Qwen) -> split on added tokens
// marked `normalized` -> pre-tokenize (regex steps) -> BPE each piece (word cache) ->
// post-process (BOS/EOS template when asked). A Tokenizer is immutable after loading, apart
// from its internal word cache, and safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"

namespace pg::io {
class GgufFile;
}

namespace pg::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;       // UTF-8, matched exactly
  bool special = true;       // skipped by Decode(skip_special); not matched when !parse_special
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches when not inside a word
  bool normalized = false;   // matched against normalized text (after NFC), not raw text
};

enum class Normalizer { kNone, kNfc };

// Everything a loader gathers; Tokenizer's constructor validates and indexes it.
struct TokenizerSpec {
  BpeParams bpe;
  std::vector<PreTokenizeStep> pre_tokenize;
  Normalizer normalizer = Normalizer::kNone;
  std::vector<AddedToken> added_tokens;
  // Post-processor template: ids put around the text when EncodeOptions::add_bos is set.
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;  // first one is "the" EOS
  std::optional<int32_t> pad_id;
  std::string name;  // for messages: file path or model name
};

struct EncodeOptions {
  // Apply the model's post-processor template: the BOS (and any suffix) its tokenizer.json
  // TemplateProcessing or GGUF add_bos_token/add_eos_token asks for. False adds nothing.
  bool add_bos = true;
  // Match special added tokens in the text. False (for untrusted user text) encodes
  // "<|im_end|>" as ordinary text; non-special added tokens still match (as in HF's
  // encode_special_tokens).
  bool parse_special = true;
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerSpec spec);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // HF tokenizer.json (model BPE; pre-tokenizers Sequence/Split/ByteLevel/Digits; normalizer
  // none or NFC; decoder ByteLevel; post-processor ByteLevel/TemplateProcessing/Sequence).
  // Throws pg::Error: kNotFound (no file), kMalformed (bad JSON/fields), kUnsupported.
  static std::unique_ptr<Tokenizer> FromHfJson(const std::string& path);
  static std::unique_ptr<Tokenizer> FromHfJsonText(std::string_view json, std::string name);
  // GGUF metadata: tokenizer.ggml.{model == "gpt2", tokens, merges, token_type, pre,
  // bos/eos/eot/pad_token_id, add_bos_token}. Unknown `pre` -> kUnsupported.
  static std::unique_ptr<Tokenizer> FromGguf(const io::GgufFile& gguf);

  // Input must be valid UTF-8 (else pg::Error(kInvalidArgument)).
  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& opts = {}) const;
  // Appends to *out (no clear): for building a prompt from parts without copies.
  void EncodeAppend(std::string_view text, const EncodeOptions& opts,
                    std::vector<int32_t>* out) const;

  // ids -> text. Invalid UTF-8 from partial byte tokens becomes U+FFFD (as HF's decode).
  // An id outside [0, vocab_size()) throws pg::Error(kOutOfRange).
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // Raw bytes the id contributes to the decoded text (may be a partial UTF-8 sequence).
  std::string_view TokenToPiece(int32_t id) const;
  // Id of a token by its text (added token content or byte-level vocab spelling decoded to
  // bytes, i.e. plain text such as " the"); -1 when absent.
  int32_t FindToken(std::string_view text) const;

  bool IsSpecial(int32_t id) const;
  bool IsEos(int32_t id) const;
  int32_t vocab_size() const { return int32_t(pieces_.size()); }
  std::optional<int32_t> bos_id() const { return spec_.bos_id; }
  const std::vector<int32_t>& eos_ids() const { return spec_.eos_ids; }
  std::optional<int32_t> pad_id() const { return spec_.pad_id; }
  const std::vector<AddedToken>& added_tokens() const { return spec_.added_tokens; }
  // Overrides the EOS set (e.g. from generation_config.json's eos_token_id list).
  void SetEosIds(std::vector<int32_t> ids);

 private:
  struct Trie;
  struct SegmentScratch;
  // Splits [text] on added tokens from `trie` and calls emit(segment) / emit_added(id).
  template <typename TextFn, typename AddedFn>
  void SplitOnAdded(std::string_view text, const Trie& trie, bool parse_special, TextFn&& on_text,
                    AddedFn&& on_added) const;
  void EncodeSegment(std::string_view text, bool parse_special, std::vector<int32_t>* out) const;
  void EncodeNormalized(std::string_view text, std::vector<int32_t>* out) const;

  TokenizerSpec spec_;                // spec_.bpe is moved into bpe_
  std::vector<std::string> pieces_;   // id -> decoded bytes (declared before bpe_: copied first)
  BpeModel bpe_;
  PreTokenizer pre_;
  std::vector<uint8_t> is_special_;   // id -> 1 for special added tokens
  std::unique_ptr<Trie> raw_trie_;    // added tokens with normalized == false
  std::unique_ptr<Trie> norm_trie_;   // added tokens with normalized == true
};

// Incremental detokenizer for streaming: Push() returns the text that became complete with
// this token; a UTF-8 sequence split across tokens is held back until complete, so nothing
// emitted is ever a partial character. Invariant: concatenating every Push() result and
// Flush() equals tokenizer.Decode(all ids, skip_special).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}
  std::string Push(int32_t id);
  // Emits what is still held (an unfinished sequence becomes U+FFFD) and resets.
  std::string Flush();
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // < 4 bytes: the start of an incomplete UTF-8 sequence
};

}  // namespace pg::tokenizer
