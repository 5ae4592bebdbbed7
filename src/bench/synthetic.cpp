#include "bench/synthetic.h"

#include <fmt/format.h>

#include <array>
#include <string>
#include <string_view>

#include "core/status.h"

namespace pg::bench {

uint64_t SplitMix64::Next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t SplitMix64::Uniform(int64_t lo, int64_t hi) {
  PG_CHECK(hi >= lo);
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  if (span == 0) return static_cast<int64_t>(Next());  // full 64-bit range
  // Rejection sampling removes the modulo bias.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  uint64_t x;
  do {
    x = Next();
  } while (x >= limit);
  return lo + static_cast<int64_t>(x % span);
}

namespace {

constexpr std::array<std::string_view, 32> kWords = {
    "cache",  "request", "token",   "buffer", "parse",   "config", "index",  "stream",
    "worker", "batch",   "session", "render", "schema",  "retry",  "queue",  "handler",
    "loader", "encode",  "decode",  "merge",  "filter",  "record", "client", "server",
    "layout", "commit",  "policy",  "bucket", "payload", "vector", "matrix", "report"};
constexpr std::array<std::string_view, 8> kModules = {
    "core", "utils", "io", "api", "models", "storage", "cli", "scheduler"};
constexpr std::array<std::string_view, 6> kExceptions = {
    "ValueError", "KeyError", "TypeError", "AttributeError", "IndexError", "RuntimeError"};
constexpr std::array<std::string_view, 4> kLevels = {"INFO", "DEBUG", "WARNING", "ERROR"};

constexpr std::string_view kSystemPrompt =
    "You are a software engineering agent working in a checked-out repository. You can run "
    "shell commands with the `bash` tool and edit files with the `str_replace_editor` tool. "
    "Read the issue, locate the relevant code, reproduce the bug with a minimal script, fix "
    "the source (not the tests), and run the test suite. Think step by step and keep each "
    "command focused. When you are done, submit your changes.";

template <size_t N>
std::string_view Pick(SplitMix64& rng, const std::array<std::string_view, N>& items) {
  return items[static_cast<size_t>(rng.Uniform(0, N - 1))];
}

std::string Ident(SplitMix64& rng) {
  return fmt::format("{}_{}", Pick(rng, kWords), Pick(rng, kWords));
}

std::string PathName(SplitMix64& rng) {
  return fmt::format("src/{}/{}.py", Pick(rng, kModules), Ident(rng));
}

std::string CodeBlock(SplitMix64& rng) {
  std::string out = fmt::format("```python\n# {}\n", PathName(rng));
  const int num_functions = static_cast<int>(rng.Uniform(1, 3));
  for (int f = 0; f < num_functions; ++f) {
    std::string a = Ident(rng), b = Ident(rng);
    out += fmt::format("def {}({}, {}=None):\n", Ident(rng), a, b);
    out += fmt::format("    \"\"\"Return the {} for a {}.\"\"\"\n", Pick(rng, kWords), a);
    out += fmt::format("    if {} is None:\n        {} = {{}}\n", b, b);
    const int num_lines = static_cast<int>(rng.Uniform(2, 6));
    for (int l = 0; l < num_lines; ++l) {
      out += fmt::format("    {} = {}.get('{}', {})\n", Ident(rng), b, Pick(rng, kWords),
                         rng.Uniform(0, 4096));
    }
    out += fmt::format("    return {}\n\n", a);
  }
  return out + "```\n";
}

std::string TestLog(SplitMix64& rng) {
  std::string out = "$ python -m pytest -x -q\n";
  const int num_tests = static_cast<int>(rng.Uniform(3, 8));
  for (int t = 0; t < num_tests; ++t) {
    out += fmt::format("tests/test_{}.py::test_{} {}\n", Pick(rng, kModules), Ident(rng),
                       rng.Uniform(0, 4) == 0 ? "FAILED" : "PASSED");
  }
  out += fmt::format("E   {}: '{}' at {}:{}\n", Pick(rng, kExceptions), Ident(rng), PathName(rng),
                     rng.Uniform(10, 900));
  out += fmt::format("{} passed, {} failed in {}.{:02d}s\n", rng.Uniform(10, 300),
                     rng.Uniform(0, 5), rng.Uniform(0, 60), rng.Uniform(0, 99));
  return out;
}

std::string Traceback(SplitMix64& rng) {
  std::string out = "Traceback (most recent call last):\n";
  const int depth = static_cast<int>(rng.Uniform(2, 5));
  for (int d = 0; d < depth; ++d) {
    out += fmt::format("  File \"/repo/{}\", line {}, in {}\n    {} = {}({})\n", PathName(rng),
                       rng.Uniform(1, 2000), Ident(rng), Ident(rng), Ident(rng), Ident(rng));
  }
  out += fmt::format("{}: unexpected {} {}\n", Pick(rng, kExceptions), Pick(rng, kWords),
                     rng.Uniform(0, 1 << 20));
  return out;
}

std::string Diff(SplitMix64& rng) {
  std::string path = PathName(rng);
  std::string out = fmt::format("diff --git a/{0} b/{0}\n--- a/{0}\n+++ b/{0}\n", path);
  out += fmt::format("@@ -{},{} +{},{} @@\n", rng.Uniform(1, 500), rng.Uniform(3, 9),
                     rng.Uniform(1, 500), rng.Uniform(3, 9));
  const int num_lines = static_cast<int>(rng.Uniform(3, 8));
  for (int l = 0; l < num_lines; ++l) {
    const char mark = "+- "[rng.Uniform(0, 2)];
    out += fmt::format("{}    {} = {}({})\n", mark, Ident(rng), Ident(rng), rng.Uniform(0, 99));
  }
  return out;
}

std::string LogLines(SplitMix64& rng) {
  std::string out;
  const int num_lines = static_cast<int>(rng.Uniform(4, 10));
  for (int l = 0; l < num_lines; ++l) {
    out += fmt::format("2025-{:02d}-{:02d} {:02d}:{:02d}:{:02d},{:03d} {} [{}] {} {} took {} ms\n",
                       rng.Uniform(1, 12), rng.Uniform(1, 28), rng.Uniform(0, 23),
                       rng.Uniform(0, 59), rng.Uniform(0, 59), rng.Uniform(0, 999),
                       Pick(rng, kLevels), Pick(rng, kModules), Ident(rng), Pick(rng, kWords),
                       rng.Uniform(1, 5000));
  }
  return out;
}

std::string GrepOutput(SplitMix64& rng) {
  std::string word = Ident(rng);
  std::string out = fmt::format("$ grep -rn \"{}\" src/\n", word);
  const int num_hits = static_cast<int>(rng.Uniform(2, 7));
  for (int h = 0; h < num_hits; ++h) {
    out += fmt::format("{}:{}:    {} = {}.{}()\n", PathName(rng), rng.Uniform(1, 999), word,
                       Ident(rng), Pick(rng, kWords));
  }
  return out;
}

// One piece of agent-looking content, 60-400 tokens.
std::string Block(SplitMix64& rng) {
  switch (rng.Uniform(0, 5)) {
    case 0: return CodeBlock(rng);
    case 1: return TestLog(rng);
    case 2: return Traceback(rng);
    case 3: return Diff(rng);
    case 4: return LogLines(rng);
    default: return GrepOutput(rng);
  }
}

// Appends blocks to `text` until it measures about `target` tokens, then cuts it to the longest
// prefix measuring <= target. Counter calls: a few rounds of growth, then a binary search.
std::string FillToTarget(std::string text, int64_t target, SplitMix64& rng,
                         TokenCounter& counter) {
  int64_t count = counter.Count(text);
  size_t fits_len = count <= target ? text.size() : 0;  // a prefix length known to fit
  while (count < target) {
    fits_len = text.size();
    const double bytes_per_token =
        count > 0 ? static_cast<double>(text.size()) / static_cast<double>(count) : 4.0;
    // Overshoot the estimate by 10% (and at least one block) so one or two rounds suffice.
    const size_t goal = text.size() + static_cast<size_t>(static_cast<double>(target - count) *
                                                          bytes_per_token * 1.1) + 1;
    while (text.size() < goal) text += Block(rng);
    count = counter.Count(text);
  }
  if (count == target) return text;
  // Invariant: Count(text[0, lo)) <= target < Count(text[0, hi)).
  size_t lo = fits_len, hi = text.size();
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    if (counter.Count(std::string_view(text).substr(0, mid)) <= target) lo = mid;
    else hi = mid;
  }
  text.resize(lo);
  return text;
}

Conversation MakeConversation(const SyntheticParams& p, int index, TokenCounter& counter) {
  // Independent streams per conversation and per turn (see the header).
  const uint64_t conv_seed = p.seed * 0x100000001B3ull + static_cast<uint64_t>(index) + 1;
  SplitMix64 conv_rng(conv_seed);
  const int num_turns = static_cast<int>(conv_rng.Uniform(p.min_turns, p.max_turns));
  Conversation conv;
  int64_t accumulated = 0;
  for (int t = 0; t < num_turns; ++t) {
    SplitMix64 rng(conv_seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(t + 1)));
    Turn turn;
    if (t == 0) {
      // The system prompt is part of the first turn's budget; tiny budgets go without it.
      int64_t system_tokens = counter.Count(kSystemPrompt);
      const bool with_system = 2 * system_tokens <= p.first_turn_tokens;
      if (!with_system) system_tokens = 0;
      const int64_t user_target = p.first_turn_tokens - system_tokens;
      std::string task = fmt::format(
          "<issue>\n{} fails with {} when `{}` is empty (conversation {}).\nSteps to "
          "reproduce are below, followed by the files involved.\n</issue>\n",
          Ident(rng), Pick(rng, kExceptions), Ident(rng), index);
      if (with_system) turn.messages.push_back({"system", std::string(kSystemPrompt)});
      turn.messages.push_back({"user", FillToTarget(std::move(task), user_target, rng, counter)});
      accumulated += system_tokens + counter.Count(turn.messages.back().content);
    } else {
      std::string head = fmt::format("Observation (step {}):\n", t);
      turn.messages.push_back(
          {"user", FillToTarget(std::move(head), p.turn_growth_tokens, rng, counter)});
      accumulated += counter.Count(turn.messages.back().content);
    }
    turn.prompt_tokens = accumulated;
    conv.turns.push_back(std::move(turn));
  }
  return conv;
}

}  // namespace

Dataset GenerateSynthetic(const SyntheticParams& p, TokenCounter& counter) {
  PG_ENSURE(p.num_conversations >= 0, kInvalidArgument, "number of conversations must be >= 0");
  PG_ENSURE(p.first_turn_tokens >= 16, kInvalidArgument,
            "first turn target must be at least 16 tokens (got {})", p.first_turn_tokens);
  PG_ENSURE(p.turn_growth_tokens >= 8, kInvalidArgument,
            "per-turn growth must be at least 8 tokens (got {})", p.turn_growth_tokens);
  PG_ENSURE(p.min_turns >= 1 && p.max_turns >= p.min_turns, kInvalidArgument,
            "turn range [{}, {}] is empty or below 1", p.min_turns, p.max_turns);
  Dataset out;
  out.conversations.reserve(static_cast<size_t>(p.num_conversations));
  for (int i = 0; i < p.num_conversations; ++i) {
    out.conversations.push_back(MakeConversation(p, p.first_conversation + i, counter));
  }
  return out;
}

}  // namespace pg::bench
