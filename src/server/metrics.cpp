#include "server/metrics.h"

#include <prometheus/text_serializer.h>

namespace pg::server {
namespace {
using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

Histogram::BucketBoundaries LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5,
          0.75,  1.0,    2.5,   5.0,  10.0, 20.0, 40.0, 80.0};
}
}  // namespace

ServerMetrics::ServerMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  requests_ = &BuildCounter().Name("peregrine_http_requests_total")
                   .Help("HTTP requests by endpoint and status code").Register(r);
  ttft_ = &BuildHistogram().Name("peregrine_time_to_first_token_seconds")
               .Help("Time from request arrival to the first generated token").Register(r)
               .Add({}, LatencyBuckets());
  itl_ = &BuildHistogram().Name("peregrine_inter_token_latency_seconds")
              .Help("Time between consecutive token deliveries of one request").Register(r)
              .Add({}, LatencyBuckets());
  tpot_ = &BuildHistogram().Name("peregrine_time_per_output_token_seconds")
               .Help("Mean time per generated token after the first, per request").Register(r)
               .Add({}, LatencyBuckets());
  e2e_ = &BuildHistogram().Name("peregrine_e2e_request_latency_seconds")
              .Help("Time from request arrival to its last byte").Register(r)
              .Add({}, LatencyBuckets());
  client_aborts_ = &BuildCounter().Name("peregrine_client_disconnect_aborts_total")
                        .Help("Requests aborted because the client went away").Register(r).Add({});
  in_flight_ = &BuildGauge().Name("peregrine_http_requests_in_flight")
                    .Help("Generation requests being served").Register(r).Add({});
  // Cumulative engine counters are exposed as counters by name; they are sampled from the
  // engine's own totals at scrape time, hence gauges underneath.
  auto total = [&](const char* name, const char* help) {
    return &BuildGauge().Name(name).Help(help).Register(r).Add({});
  };
  prompt_tokens_ = total("peregrine_prompt_tokens_total", "Prompt tokens processed (cumulative)");
  generated_tokens_ = total("peregrine_generation_tokens_total", "Tokens generated (cumulative)");
  cache_hit_tokens_ = total("peregrine_prefix_cache_hit_tokens_total",
                            "Prompt tokens served from the prefix cache (cumulative)");
  // Speculative decoding, as vLLM names them (spec_decode_num_drafts, ..._draft_tokens,
  // ..._accepted_tokens): acceptance rate = accepted / draft tokens.
  spec_drafts_ = total("peregrine_spec_decode_num_drafts_total",
                       "Decode steps that carried speculative drafts (cumulative)");
  spec_draft_tokens_ = total("peregrine_spec_decode_num_draft_tokens_total",
                             "Speculative draft tokens verified (cumulative)");
  spec_accepted_tokens_ = total("peregrine_spec_decode_num_accepted_tokens_total",
                                "Speculative draft tokens accepted (cumulative)");
  auto& kv = BuildGauge().Name("peregrine_kv_pages").Help("KV cache pages by state").Register(r);
  kv_used_ = &kv.Add({{"state", "used"}});
  kv_free_ = &kv.Add({{"state", "free"}});
  auto& reqs = BuildGauge().Name("peregrine_requests").Help("Engine requests by state").Register(r);
  running_ = &reqs.Add({{"state", "running"}});
  waiting_ = &reqs.Add({{"state", "waiting"}});
}

void ServerMetrics::CountRequest(const std::string& endpoint, int status) {
  requests_->Add({{"endpoint", endpoint}, {"status", std::to_string(status)}}).Increment();
}

std::string ServerMetrics::Render(const engine::EngineStats& s) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_->Set(static_cast<double>(s.prompt_tokens));
  generated_tokens_->Set(static_cast<double>(s.generated_tokens));
  cache_hit_tokens_->Set(static_cast<double>(s.prefix_cache_hit_tokens));
  spec_drafts_->Set(static_cast<double>(s.spec_drafts));
  spec_draft_tokens_->Set(static_cast<double>(s.spec_draft_tokens));
  spec_accepted_tokens_->Set(static_cast<double>(s.spec_accepted_tokens));
  kv_used_->Set(static_cast<double>(s.kv_pages_total - s.kv_pages_free));
  kv_free_->Set(static_cast<double>(s.kv_pages_free));
  running_->Set(s.num_running);
  waiting_->Set(s.num_waiting);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace pg::server
