// `peregrine serve`: the OpenAI-compatible HTTP server in front of the engine loop, one
// process: HTTP I/O threads + the engine thread. Blocks until SIGTERM/SIGINT, then drains.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/log.h"
#include "core/status.h"
#include "engine/local_engine.h"
#include "server/server.h"
#include "server/tokenizer_text_model.h"

namespace pg::cli {
namespace {

struct ServeFlags {
  ModelFlags model;
  DeviceFlags device;
  server::ServerConfig server;
  engine::EngineConfig engine;
  int kv_cache_mib = 512;
  int host_cache_mib = 0;
  int session_ttl_s = 300;
  int port = 8000;
  std::string chat_template_file;  // overrides the model's template
  std::string tool_call_parser;    // overrides detection from the template
  std::string speculative_config;  // JSON, vLLM's form (ParseSpeculativeConfig)
};

std::string ReadFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  PG_ENSURE(f != nullptr, kNotFound, "cannot open chat template {}", path);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

void RunServe(ServeFlags& f) {
  f.model.ApplyThreads();
  f.engine.speculative = ParseSpeculativeConfig(f.speculative_config);
  PG_ENSURE(!f.engine.speculative.enabled() || !f.device.cuda(), kUnsupported,
            "--speculative-config: speculative decoding runs on --device cpu only so far");
  engine::ModelBundle b;
  std::unique_ptr<engine::StepExecutor> executor;  // --device cuda
  std::string bundle_name;
  if (f.device.cuda()) {
    f.engine.host_cache_bytes = int64_t(f.host_cache_mib) << 20;
    DeviceModel dm = LoadOnDevice(f.model, f.device, f.engine);
    b = std::move(dm.bundle);
    bundle_name = dm.name;
    executor = std::move(dm.executor);
    f.engine.kv_cache_bytes = dm.kv_bytes;  // the GPU pool, for the start-up summary
  } else {
    b = engine::LoadBundle(f.model.ToBundleOptions());
    f.engine.kv_cache_bytes = int64_t(f.kv_cache_mib) << 20;
  }
  PG_ENSURE(b.tokenizer != nullptr, kUnsupported,
            "{} has no tokenizer (tokenizer.json or GGUF tokenizer metadata); serve needs one{}",
            b.path, f.model.tokenizer.empty() && f.device.cuda() ? " (or --tokenizer)" : "");
  f.engine.host_cache_bytes = int64_t(f.host_cache_mib) << 20;
  f.engine.session_ttl_ms = int64_t(f.session_ttl_s) * 1000;
  f.server.http.port = uint16_t(f.port);
  f.engine.max_waiting_requests = std::max(f.engine.max_waiting_requests, f.server.max_waiting_requests + 1);
  std::string name = f.server.served_model_name.empty()
                         ? (executor ? bundle_name : b.name())
                         : f.server.served_model_name;
  std::unique_ptr<engine::LocalEngine> engine_ptr =
      executor ? std::make_unique<engine::LocalEngine>(std::move(executor), b.eos_ids, name, f.engine)
               : std::make_unique<engine::LocalEngine>(*b.model, b.eos_ids, name, f.engine);
  engine::LocalEngine& engine = *engine_ptr;
  if (!f.chat_template_file.empty()) {
    b.chat_template_source = ReadFile(f.chat_template_file);
    b.chat_template = std::make_unique<jinja::ChatTemplate>(
        b.chat_template_source,
        b.tokenizer->bos_id() ? std::string(b.tokenizer->TokenToPiece(*b.tokenizer->bos_id())) : "",
        b.tokenizer->eos_ids().empty() ? "" : std::string(b.tokenizer->TokenToPiece(b.tokenizer->eos_ids()[0])));
  }
  server::TokenizerTextModelOptions topts;
  if (!f.tool_call_parser.empty()) topts.tool_format = parsers::ToolFormatFromName(f.tool_call_parser);
  server::TokenizerTextModel text(*b.tokenizer, b.chat_template.get(), b.chat_template_source, topts);
  server::ServerContext ctx{engine, text};
  int rc = server::RunServer(f.server, ctx);
  engine.Shutdown(/*drain=*/true);
  PG_LOG_INFO("server stopped (exit {})", rc);
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  f->model.Add(*cmd);
  f->device.Add(*cmd);
  auto& s = f->server;
  auto& e = f->engine;
  cmd->add_option("--host", s.http.host, "address to bind (default loopback)");
  cmd->add_option("--port", f->port, "port (0 = any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", s.api_key, "require 'Authorization: Bearer KEY'");
  cmd->add_option("--served-model-name", s.served_model_name, "model name in the API");
  cmd->add_option("--chat-template", f->chat_template_file, "Jinja chat template file (overrides the model's)");
  cmd->add_option("--tool-call-parser", f->tool_call_parser,
                  "hermes | llama3 | deepseek_v3 | kimi_k2 | none (default: detected from the template)");
  cmd->add_option("--io-threads", s.http.num_io_threads, "HTTP I/O threads")->check(CLI::PositiveNumber);
  cmd->add_option("--max-body-mib", s.http.max_body_bytes, "request body limit (bytes)")
      ->transform([](std::string v) { return std::to_string(std::stoull(v) << 20); });
  cmd->add_option("--max-waiting", s.max_waiting_requests, "waiting requests before 503")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-cache-mib", f->kv_cache_mib, "KV cache size (MiB of RAM)")->check(CLI::PositiveNumber);
  cmd->add_option("--host-cache-mib", f->host_cache_mib, "host tier for evicted prefix pages (MiB)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--page-size", e.page_size, "tokens per KV page")->check(CLI::Range(1, 1024));
  cmd->add_option("--max-step-tokens", e.max_step_tokens, "token budget of one forward pass")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-prefill-chunk", e.max_prefill_chunk_tokens,
                  "prefill tokens per request per step (0 = the step budget only)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-running", e.max_running_requests, "concurrently running requests")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--context", e.max_context_tokens, "context length (0 = the model's)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--session-ttl-s", f->session_ttl_s, "KV retention of a finished session (seconds)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--speculative-config", f->speculative_config,
                  "speculative decoding, vLLM's JSON: '{\"method\": \"ngram\", "
                  "\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4, "
                  "\"prompt_lookup_min\": 3}' (prompt-lookup drafts; --device cpu)");
  cmd->add_option("--drain-timeout-s", s.drain_timeout_s, "SIGTERM: time running requests get")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([f] { RunServe(*f); });
}

}  // namespace pg::cli
