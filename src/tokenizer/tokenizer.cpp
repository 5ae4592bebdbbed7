#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/status.h"
#include "tokenizer/normalize.h"
#include "tokenizer/unicode.h"

namespace pg::tokenizer {

// Byte trie over added-token contents: finds, at a position, the longest token starting there.
struct Tokenizer::Trie {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node index), few per node
    int32_t token = -1;                                  // index into added_tokens, or -1
  };
  std::vector<Node> nodes{Node{}};
  bool can_start[256] = {};

  void Insert(std::string_view s, int32_t token) {
    int32_t cur = 0;
    for (char ch : s) {
      const auto c = static_cast<uint8_t>(ch);
      int32_t next = -1;
      for (auto [b, idx] : nodes[cur].children)
        if (b == c) next = idx;
      if (next < 0) {
        next = int32_t(nodes.size());
        nodes[cur].children.emplace_back(c, next);
        nodes.emplace_back();
      }
      cur = next;
    }
    nodes[cur].token = token;  // a duplicate content keeps the last token
    can_start[static_cast<uint8_t>(s[0])] = true;
  }
  bool empty() const { return nodes.size() == 1; }

  // Longest token matching at text[pos]; returns its index and sets *end.
  int32_t LongestAt(std::string_view text, size_t pos, size_t* end) const {
    int32_t cur = 0, best = -1;
    for (size_t i = pos; i < text.size(); ++i) {
      const auto c = static_cast<uint8_t>(text[i]);
      int32_t next = -1;
      for (auto [b, idx] : nodes[cur].children)
        if (b == c) next = idx;
      if (next < 0) break;
      cur = next;
      if (nodes[cur].token >= 0) {
        best = nodes[cur].token;
        *end = i + 1;
      }
    }
    return best;
  }
};

namespace {

// Rust's char::is_whitespace (Unicode White_Space), used by lstrip/rstrip.
bool IsWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Start of the code point that ends at `end` (exclusive); text[..end) is valid UTF-8.
size_t PrevCharStart(std::string_view text, size_t end) {
  size_t p = end - 1;
  while (p > 0 && (static_cast<uint8_t>(text[p]) & 0xC0) == 0x80) --p;
  return p;
}

bool IsWordChar(std::string_view ch) {
  static const Regex word(R"(\A\w)");
  size_t b, e;
  return word.Find(ch, 0, &b, &e);
}

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec spec)
    : spec_(std::move(spec)),
      pieces_(spec_.bpe.vocab),
      bpe_(std::move(spec_.bpe)),
      pre_(spec_.pre_tokenize),
      raw_trie_(std::make_unique<Trie>()),
      norm_trie_(std::make_unique<Trie>()) {
  // Decoded bytes per id: model tokens from the vocab, added tokens through HF's ByteLevel
  // decoder rule (byte-level alphabet -> bytes; otherwise the content as UTF-8).
  size_t size = pieces_.size();
  for (const AddedToken& t : spec_.added_tokens) size = std::max(size, size_t(t.id) + 1);
  pieces_.resize(size);
  spec_.bpe = BpeParams{};
  is_special_.assign(pieces_.size(), 0);
  for (size_t i = 0; i < spec_.added_tokens.size(); ++i) {
    const AddedToken& t = spec_.added_tokens[i];
    PG_ENSURE(t.id >= 0 && !t.content.empty(), kMalformed, "{}: bad added token #{} ('{}')",
              spec_.name, i, t.content);
    PG_ENSURE(IsValidUtf8(t.content), kMalformed, "{}: added token #{} is not UTF-8", spec_.name,
              i);
    std::string bytes;
    pieces_[t.id] = ByteLevelToBytes(t.content, &bytes) ? bytes : t.content;
    is_special_[t.id] = t.special ? 1 : 0;
    (t.normalized ? norm_trie_ : raw_trie_)->Insert(t.content, int32_t(i));
  }
  auto check_id = [&](int32_t id, const char* what) {
    PG_ENSURE(id >= 0 && size_t(id) < pieces_.size(), kMalformed, "{}: {} id {} out of range",
              spec_.name, what, id);
  };
  for (int32_t id : spec_.prefix_ids) check_id(id, "post-processor");
  for (int32_t id : spec_.suffix_ids) check_id(id, "post-processor");
  for (int32_t id : spec_.eos_ids) check_id(id, "eos");
  if (spec_.bos_id) check_id(*spec_.bos_id, "bos");
  if (spec_.pad_id) check_id(*spec_.pad_id, "pad");
}

Tokenizer::~Tokenizer() = default;

template <typename TextFn, typename AddedFn>
void Tokenizer::SplitOnAdded(std::string_view text, const Trie& trie, bool parse_special,
                             TextFn&& on_text, AddedFn&& on_added) const {
  size_t emitted = 0;  // text[0, emitted) has been passed on
  size_t pos = 0;
  while (pos < text.size()) {
    if (!trie.can_start[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t end = 0;
    const int32_t idx = trie.LongestAt(text, pos, &end);
    if (idx < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = spec_.added_tokens[idx];
    size_t start = pos;
    pos = end;  // a skipped match still consumes its text (leftmost-longest, no overlap)
    if (!parse_special && tok.special) continue;
    if (tok.single_word) {
      const bool word_before = start > 0 && IsWordChar(text.substr(PrevCharStart(text, start)));
      const bool word_after = end < text.size() && IsWordChar(text.substr(end));
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) {
      while (start > emitted) {
        const size_t p = PrevCharStart(text, start);
        size_t q = p;
        uint32_t cp;
        if (!NextCodepoint(text, &q, &cp) || !IsWhitespace(cp)) break;
        start = p;
      }
    }
    if (tok.rstrip) {
      uint32_t cp;
      size_t q = end;
      while (q < text.size() && NextCodepoint(text, &q, &cp) && IsWhitespace(cp)) end = q;
      pos = end;
    }
    if (start > emitted) on_text(text.substr(emitted, start - emitted));
    on_added(tok.id);
    emitted = end;
  }
  if (emitted < text.size()) on_text(text.substr(emitted));
}

void Tokenizer::EncodeNormalized(std::string_view text, std::vector<int32_t>* out) const {
  thread_local std::vector<Piece> pieces, scratch;
  pre_.Split(text, &pieces, &scratch);
  for (const Piece& p : pieces) bpe_.EncodeWord(text.substr(p.begin, p.end - p.begin), out);
}

void Tokenizer::EncodeSegment(std::string_view text, bool parse_special,
                              std::vector<int32_t>* out) const {
  auto push_added = [out](int32_t id) { out->push_back(id); };
  auto on_text = [&](std::string_view segment) {
    std::string normalized;
    std::string_view norm = segment;
    if (spec_.normalizer == Normalizer::kNfc && NeedsNfc(segment)) {
      normalized = ToNfc(segment);
      norm = normalized;
    }
    if (norm_trie_->empty()) {
      EncodeNormalized(norm, out);
    } else {
      SplitOnAdded(norm, *norm_trie_, parse_special,
                   [&](std::string_view s) { EncodeNormalized(s, out); }, push_added);
    }
  };
  if (raw_trie_->empty()) {
    on_text(text);
  } else {
    SplitOnAdded(text, *raw_trie_, parse_special, on_text, push_added);
  }
}

void Tokenizer::EncodeAppend(std::string_view text, const EncodeOptions& opts,
                             std::vector<int32_t>* out) const {
  const size_t bad = FirstInvalidUtf8(text);
  PG_ENSURE(bad == text.size(), kInvalidArgument,
            "text to tokenize is not valid UTF-8 (bad byte 0x{:02X} at offset {})",
            static_cast<uint8_t>(text[bad]), bad);
  if (opts.add_bos) out->insert(out->end(), spec_.prefix_ids.begin(), spec_.prefix_ids.end());
  if (!text.empty()) EncodeSegment(text, opts.parse_special, out);
  if (opts.add_bos) out->insert(out->end(), spec_.suffix_ids.begin(), spec_.suffix_ids.end());
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, const EncodeOptions& opts) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  EncodeAppend(text, opts, &out);
  return out;
}

std::string_view Tokenizer::TokenToPiece(int32_t id) const {
  PG_ENSURE(id >= 0 && id < vocab_size(), kOutOfRange, "token id {} out of range [0, {})", id,
            vocab_size());
  return pieces_[id];
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    const std::string_view piece = TokenToPiece(id);
    if (skip_special && is_special_[id]) continue;
    bytes.append(piece);
  }
  std::string out;
  out.reserve(bytes.size());
  AppendUtf8Lossy(&out, bytes);
  return out;
}

int32_t Tokenizer::FindToken(std::string_view text) const {
  for (const AddedToken& t : spec_.added_tokens)
    if (t.content == text) return t.id;
  return bpe_.Find(text);
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && is_special_[id] != 0;
}

bool Tokenizer::IsEos(int32_t id) const {
  return std::find(spec_.eos_ids.begin(), spec_.eos_ids.end(), id) != spec_.eos_ids.end();
}

void Tokenizer::SetEosIds(std::vector<int32_t> ids) {
  for (int32_t id : ids)
    PG_ENSURE(id >= 0 && id < vocab_size(), kInvalidArgument, "eos id {} out of range", id);
  spec_.eos_ids = std::move(ids);
}

std::string StreamDecoder::Push(int32_t id) {
  const std::string_view piece = tokenizer_->TokenToPiece(id);
  if (skip_special_ && tokenizer_->IsSpecial(id)) return {};
  pending_.append(piece);
  const size_t hold = IncompleteUtf8Tail(pending_);
  std::string out;
  AppendUtf8Lossy(&out, std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out;
  AppendUtf8Lossy(&out, pending_);
  pending_.clear();
  return out;
}

}  // namespace pg::tokenizer
