// `peregrine generate` (one completion, streamed) and `peregrine chat` (interactive, with the
// model's chat template; the KV of earlier turns is reused).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <iostream>
#include <memory>
#include <random>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/status.h"
#include "runtime/sequence_runner.h"

namespace pg::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct GenerateFlags {
  ModelFlags model;
  DeviceFlags device;  // generate only
  SamplingFlags sampling;
  std::string prompt;
  bool chat_format = false;  // wrap the prompt as one user message in the chat template
  bool no_bos = false;
  int context = 0;
};

// Streams `tokens` as UTF-8-complete text; stops at an EOS unless ignore_eos.
struct Streamer {
  const tokenizer::Tokenizer& tok;
  tokenizer::StreamDecoder dec;
  explicit Streamer(const tokenizer::Tokenizer& t) : tok(t), dec(t, /*skip_special=*/false) {}
  void Push(int32_t id) {
    std::string s = dec.Push(id);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  }
  void Finish() {
    std::string s = dec.Flush();
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  }
};

uint64_t FallbackSeed() { return std::random_device{}(); }

std::vector<int32_t> EncodePrompt(const engine::ModelBundle& b, const GenerateFlags& f) {
  std::vector<int32_t> prompt;
  if (f.chat_format) {
    PG_ENSURE(b.chat_template != nullptr, kUnsupported, "{} has no chat template", b.path);
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    msgs.push_back({{"role", "user"}, {"content", f.prompt}});
    prompt = b.tokenizer->Encode(b.chat_template->Render(msgs), {.add_bos = false, .parse_special = true});
  } else {
    prompt = b.tokenizer->Encode(f.prompt, {.add_bos = !f.no_bos, .parse_special = true});
  }
  PG_ENSURE(!prompt.empty(), kInvalidArgument, "the prompt is empty");
  return prompt;
}

void PrintTimes(size_t num_prompt, size_t num_generated, double prefill_s, double decode_s) {
  std::fprintf(stderr, "\n[%zu prompt tokens in %.3f s (%.1f tok/s); %zu generated in %.3f s (%.1f tok/s)]\n",
               num_prompt, prefill_s, double(num_prompt) / prefill_s, num_generated, decode_s,
               num_generated > 1 ? double(num_generated - 1) / decode_s : 0.0);
}

// --device cuda: one request through the engine and the CUDA step executor.
void RunGenerateOnDevice(const GenerateFlags& f) {
  engine::EngineConfig ec;
  ec.max_context_tokens = f.context;
  ec.max_running_requests = 1;
  DeviceModel dm = LoadOnDevice(f.model, f.device, ec);
  const engine::ModelBundle& b = dm.bundle;
  PG_ENSURE(b.tokenizer != nullptr, kUnsupported, "{} has no tokenizer; generate needs one (or --tokenizer)", b.path);
  const std::vector<int32_t> prompt = EncodePrompt(b, f);
  engine::Request r;
  r.prompt_tokens = prompt;
  r.sampling = f.sampling.ToParams();
  if (!r.sampling.seed) r.sampling.seed = FallbackSeed();
  engine::LocalEngine eng(std::move(dm.executor), b.eos_ids, dm.name, ec);
  Streamer out(*b.tokenizer);
  std::promise<std::string> done;  // the error, if any
  size_t generated = 0;
  auto t0 = Clock::now();
  Clock::time_point t_first = t0;
  eng.Submit(std::move(r), [&](const engine::TokenEvent& ev) {  // engine thread
    for (int32_t id : ev.tokens) {
      if (generated++ == 0) t_first = Clock::now();
      out.Push(id);
    }
    if (ev.finished) done.set_value(ev.error);
  });
  const std::string error = done.get_future().get();
  out.Finish();
  auto t1 = Clock::now();
  eng.Shutdown(/*drain=*/false);
  PG_ENSURE(error.empty(), kInternal, "generation failed: {}", error);
  PrintTimes(prompt.size(), generated, std::chrono::duration<double>(t_first - t0).count(),
             std::chrono::duration<double>(t1 - t_first).count());
}

void RunGenerate(const GenerateFlags& f) {
  f.model.ApplyThreads();
  if (f.device.cuda()) return RunGenerateOnDevice(f);
  engine::ModelBundle b = engine::LoadBundle(f.model.ToBundleOptions());
  PG_ENSURE(b.tokenizer != nullptr, kUnsupported, "{} has no tokenizer; generate needs one", b.path);
  const std::vector<int32_t> prompt = EncodePrompt(b, f);
  runtime::SamplingParams sp = f.sampling.ToParams();
  runtime::SequenceRunner runner(*b.model, {.max_context = f.context});
  runtime::SamplerState st(sp, prompt, FallbackSeed());
  runtime::GenerateOptions go{.max_new_tokens = sp.max_tokens};
  if (!sp.ignore_eos) go.stop_ids = b.eos_ids;
  Streamer out(*b.tokenizer);
  auto t0 = Clock::now();
  Clock::time_point t_first;
  bool first = true;
  auto tokens = runtime::Generate(runner, prompt, st, go, [&](int32_t id) {
    if (first) { t_first = Clock::now(); first = false; }
    bool is_stop = std::find(go.stop_ids.begin(), go.stop_ids.end(), id) != go.stop_ids.end();
    if (!is_stop) out.Push(id);
  });
  out.Finish();
  auto t1 = Clock::now();
  PrintTimes(prompt.size(), tokens.size(), std::chrono::duration<double>(t_first - t0).count(),
             std::chrono::duration<double>(t1 - t_first).count());
}

void RunChat(const GenerateFlags& f) {
  f.model.ApplyThreads();
  engine::ModelBundle b = engine::LoadBundle(f.model.ToBundleOptions());
  PG_ENSURE(b.tokenizer && b.chat_template, kUnsupported,
            "{} has no tokenizer or chat template; chat needs both", b.path);
  runtime::SamplingParams sp = f.sampling.ToParams();
  runtime::SequenceRunner runner(*b.model, {.max_context = f.context});
  runtime::SamplerState st(sp, {}, FallbackSeed());
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::vector<int32_t> seq;  // tokens whose KV the runner holds
  const bool tty = isatty(0);
  std::fprintf(stderr, "chatting with %s — /reset clears the conversation, /exit or Ctrl-D quits\n",
               b.name().c_str());
  std::string line;
  for (;;) {
    if (tty) std::fprintf(stderr, "\n> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages = nlohmann::ordered_json::array();
      seq.clear();
      runner.Reset();
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    std::vector<int32_t> prompt =
        b.tokenizer->Encode(b.chat_template->Render(messages), {.add_bos = false, .parse_special = true});
    // Reuse the KV of the longest common prefix with what the runner already holds.
    size_t common = 0;
    while (common < seq.size() && common < prompt.size() && seq[common] == prompt[common]) ++common;
    if (common == prompt.size()) --common;  // at least one token must run to get logits
    runner.Truncate(int(common));
    seq.assign(prompt.begin(), prompt.end());
    std::vector<int32_t> delta(prompt.begin() + std::ptrdiff_t(common), prompt.end());
    PG_ENSURE(int(prompt.size()) < runner.max_context(), kOutOfRange,
              "the conversation ({} tokens) no longer fits the context of {} tokens; /reset",
              prompt.size(), runner.max_context());
    runtime::GenerateOptions go{.max_new_tokens = sp.max_tokens, .stop_ids = b.eos_ids};
    Streamer out(*b.tokenizer);
    std::string reply;
    tokenizer::StreamDecoder text(*b.tokenizer, true);
    auto gen = runtime::Generate(runner, delta, st, go, [&](int32_t id) {
      if (std::find(go.stop_ids.begin(), go.stop_ids.end(), id) != go.stop_ids.end()) return;
      out.Push(id);
      reply += text.Push(id);
    });
    out.Finish();
    reply += text.Flush();
    std::fputc('\n', stdout);
    seq.insert(seq.end(), gen.begin(), gen.end());
    messages.push_back({{"role", "assistant"}, {"content", reply}});
  }
}

void AddCommon(CLI::App* cmd, GenerateFlags& f) {
  f.model.Add(*cmd);
  f.sampling.Add(*cmd);
  cmd->add_option("--context", f.context, "context length in tokens (default: the model's)")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace

void AddGenerateCommand(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "complete a prompt, streaming to stdout");
  AddCommon(cmd, *f);
  f->device.Add(*cmd);
  cmd->add_option("-p,--prompt", f->prompt, "prompt text")->required();
  cmd->add_flag("--chat-format", f->chat_format, "wrap the prompt in the chat template as a user message");
  cmd->add_flag("--no-bos", f->no_bos, "do not add the model's BOS token");
  cmd->callback([f] { RunGenerate(*f); });
}

void AddChatCommand(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  f->sampling.params.max_tokens = 512;
  CLI::App* cmd = app.add_subcommand("chat", "interactive chat on stdin/stdout");
  AddCommon(cmd, *f);
  cmd->callback([f] { RunChat(*f); });
}

}  // namespace pg::cli
