// A small blocking HTTP/1.1 client over Boost.Beast for talking to OpenAI-compatible servers.
// Plain http:// only (benchmarks run next to the server or behind a TLS-terminating proxy).
// One TCP connection per request: each benchmark worker is a thread that owns its client, so
// connection setup (tens of microseconds on a LAN) is included in the measured latency, the
// same as for a client that does not reuse connections.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace pg::bench {

struct Url {
  std::string host;
  std::string port;       // numeric or service name; "80" when the URL names none
  std::string base_path;  // without a trailing '/', e.g. "" or "/proxy"; "/v1" is dropped
};

// Parses "http://host[:port][/path]". Throws pg::Error(kInvalidArgument) on anything else.
// A trailing "/v1" is removed from the path, so both "http://h:8000" and "http://h:8000/v1"
// name the same server (endpoints are given with their "/v1" prefix).
Url ParseUrl(std::string_view url);

struct HttpResponse {
  int status = 0;
  std::string body;
};

struct HttpClientParams {
  Url url;
  double timeout_s = 600.0;  // whole request, connect to last byte
  std::string api_key;       // sent as "Authorization: Bearer <key>" when not empty
};

class HttpClient {
 public:
  explicit HttpClient(HttpClientParams params) : params_(std::move(params)) {}

  // Network failures and timeouts throw pg::Error(kIo); HTTP error statuses are returned.
  HttpResponse Get(std::string_view path);
  HttpResponse PostJson(std::string_view path, const std::string& json_body);

  // POSTs and hands every piece of the (de-chunked) response body to on_body as it arrives.
  // Returns the HTTP status; for a status other than 2xx the body is collected into
  // *error_body instead of being streamed.
  int PostStream(std::string_view path, const std::string& json_body,
                 const std::function<void(std::string_view)>& on_body, std::string* error_body);

  const HttpClientParams& params() const { return params_; }

 private:
  HttpClientParams params_;
};

}  // namespace pg::bench
