#include "bench/token_counter.h"

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/status.h"

namespace pg::bench {

using nlohmann::json;

int64_t ServerTokenCounter::Count(std::string_view text) {
  json req;
  if (shape_ == TokenizeShape::kVllm) {
    req = {{"prompt", text}, {"add_special_tokens", false}};
    if (!model_.empty()) req["model"] = model_;
  } else {
    req = {{"content", text}, {"add_special", false}};
  }
  HttpResponse resp =
      client_.PostJson("/tokenize", req.dump(-1, ' ', false, json::error_handler_t::replace));
  PG_ENSURE(resp.status == 200, kIo, "/tokenize answered HTTP {}: {}", resp.status,
            resp.body.substr(0, 200));
  json body = json::parse(resp.body, nullptr, false);
  PG_ENSURE(!body.is_discarded() && body.is_object(), kMalformed,
            "/tokenize answered something that is not a JSON object");
  if (body.contains("count") && body["count"].is_number_integer()) {
    return body["count"].get<int64_t>();
  }
  PG_ENSURE(body.contains("tokens") && body["tokens"].is_array(), kMalformed,
            "/tokenize answer has neither \"count\" nor a \"tokens\" list");
  return static_cast<int64_t>(body["tokens"].size());
}

std::unique_ptr<TokenCounter> MakeTokenCounter(const HttpClientParams& client,
                                               const std::string& model) {
  // A probe with several words: a server that ignores the field it does not know and
  // tokenizes an empty string would answer 0 (or only a BOS token), which we reject.
  static constexpr std::string_view kProbe = "def main():\n    print('hello, world')\n";
  for (TokenizeShape shape : {TokenizeShape::kVllm, TokenizeShape::kLlamaCpp}) {
    auto counter = std::make_unique<ServerTokenCounter>(client, model, shape);
    try {
      if (counter->Count(kProbe) >= 4) {
        PG_LOG_INFO("token counts from the server's /tokenize ({} shape)", counter->Name());
        return counter;
      }
    } catch (const Error& e) {
      PG_LOG_DEBUG("/tokenize in {} shape failed: {}", counter->Name(), e.what());
    }
  }
  PG_LOG_WARN(
      "the server has no usable /tokenize endpoint; token counts are ESTIMATED as bytes/4, so "
      "synthetic turn sizes are approximate");
  return std::make_unique<CharEstimateCounter>();
}

}  // namespace pg::bench
