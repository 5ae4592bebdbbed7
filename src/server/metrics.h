// Prometheus metrics of the server, in a registry this object owns (no global state).
// Latency histograms are in seconds; token counters are cumulative.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <mutex>
#include <string>

#include "engine/api.h"

namespace pg::server {

class ServerMetrics {
 public:
  ServerMetrics();
  void CountRequest(const std::string& endpoint, int status);
  void ObserveTtft(double seconds) { ttft_->Observe(seconds); }
  void ObserveItl(double seconds) { itl_->Observe(seconds); }
  void ObserveTpot(double seconds) { tpot_->Observe(seconds); }
  void ObserveE2e(double seconds) { e2e_->Observe(seconds); }
  void CountAbortedByClient() { client_aborts_->Increment(); }
  void AddInFlight(double delta) { in_flight_->Increment(delta); }
  // Text exposition format 0.0.4; engine gauges and counters are sampled from `stats` now.
  std::string Render(const engine::EngineStats& stats);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* tpot_;
  prometheus::Histogram* e2e_;
  prometheus::Counter* client_aborts_;
  prometheus::Gauge* in_flight_;
  prometheus::Gauge* prompt_tokens_;
  prometheus::Gauge* generated_tokens_;
  prometheus::Gauge* cache_hit_tokens_;
  prometheus::Gauge* spec_drafts_;
  prometheus::Gauge* spec_draft_tokens_;
  prometheus::Gauge* spec_accepted_tokens_;
  prometheus::Gauge* kv_used_;
  prometheus::Gauge* kv_free_;
  prometheus::Gauge* running_;
  prometheus::Gauge* waiting_;
  std::mutex mu_;  // guards Render (gauges set then serialised as one snapshot)
};

}  // namespace pg::server
