#include "bench/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <chrono>

#include "core/status.h"

namespace pg::bench {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

Url ParseUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    if (url.substr(0, 8) == "https://") {
      Throw(ErrorCode::kUnsupported, "https URLs are not supported ({}); use http://", url);
    }
    Throw(ErrorCode::kInvalidArgument, "URL must start with http:// (got '{}')", url);
  }
  std::string_view rest = url.substr(kScheme.size());
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  PG_ENSURE(!authority.empty(), kInvalidArgument, "URL '{}' has no host", url);
  Url out;
  if (authority.front() == '[') {  // [ipv6]:port
    size_t close = authority.find(']');
    PG_ENSURE(close != std::string_view::npos, kInvalidArgument, "bad IPv6 host in '{}'", url);
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view tail = authority.substr(close + 1);
    out.port = tail.size() > 1 && tail.front() == ':' ? std::string(tail.substr(1)) : "80";
  } else if (size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    out.host = std::string(authority.substr(0, colon));
    out.port = std::string(authority.substr(colon + 1));
  } else {
    out.host = std::string(authority);
    out.port = "80";
  }
  PG_ENSURE(!out.host.empty() && !out.port.empty(), kInvalidArgument, "URL '{}' has no host or port",
            url);
  for (char c : out.port) {
    PG_ENSURE(c >= '0' && c <= '9', kInvalidArgument, "URL '{}' has a non-numeric port", url);
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (path.size() >= 3 && path.substr(path.size() - 3) == "/v1") path.remove_suffix(3);
  out.base_path = std::string(path);
  return out;
}

namespace {

struct Connection {
  asio::io_context io;
  beast::tcp_stream stream{io};
  beast::flat_buffer buffer;
};

http::request<http::string_body> MakeRequest(const HttpClientParams& p, http::verb verb,
                                             std::string_view path, const std::string* body) {
  http::request<http::string_body> req{verb, p.url.base_path + std::string(path), 11};
  req.set(http::field::host, p.url.host + ":" + p.url.port);
  req.set(http::field::user_agent, "peregrine-bench");
  req.set(http::field::connection, "close");
  if (!p.api_key.empty()) req.set(http::field::authorization, "Bearer " + p.api_key);
  if (body != nullptr) {
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream, application/json");
    req.body() = *body;
    req.prepare_payload();
  }
  return req;
}

void Fail(const HttpClientParams& p, std::string_view what, const beast::error_code& ec) {
  Throw(ErrorCode::kIo, "HTTP {} to {}:{}: {}", what, p.url.host, p.url.port, ec.message());
}

// Connects and writes the request; the stream's deadline covers the whole exchange.
void Send(Connection& c, const HttpClientParams& p, const http::request<http::string_body>& req) {
  beast::error_code ec;
  tcp::resolver resolver(c.io);
  auto endpoints = resolver.resolve(p.url.host, p.url.port, ec);
  if (ec) Fail(p, "resolve", ec);
  c.stream.expires_after(std::chrono::milliseconds(static_cast<int64_t>(p.timeout_s * 1000)));
  c.stream.connect(endpoints, ec);
  if (ec) Fail(p, "connect", ec);
  http::write(c.stream, req, ec);
  if (ec) Fail(p, "write", ec);
}

HttpResponse Exchange(const HttpClientParams& p, http::verb verb, std::string_view path,
                      const std::string* body) {
  Connection c;
  Send(c, p, MakeRequest(p, verb, path, body));
  http::response_parser<http::string_body> parser;
  parser.body_limit(1ull << 30);
  beast::error_code ec;
  http::read(c.stream, c.buffer, parser, ec);
  if (ec) Fail(p, "read", ec);
  HttpResponse out;
  out.status = static_cast<int>(parser.get().result_int());
  out.body = std::move(parser.get().body());
  c.stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return out;
}

}  // namespace

HttpResponse HttpClient::Get(std::string_view path) {
  return Exchange(params_, http::verb::get, path, nullptr);
}

HttpResponse HttpClient::PostJson(std::string_view path, const std::string& json_body) {
  return Exchange(params_, http::verb::post, path, &json_body);
}

int HttpClient::PostStream(std::string_view path, const std::string& json_body,
                           const std::function<void(std::string_view)>& on_body,
                           std::string* error_body) {
  Connection c;
  Send(c, params_, MakeRequest(params_, http::verb::post, path, &json_body));
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  beast::error_code ec;
  http::read_header(c.stream, c.buffer, parser, ec);
  if (ec) Fail(params_, "read header", ec);
  const int status = static_cast<int>(parser.get().result_int());
  const bool ok = status >= 200 && status < 300;
  std::array<char, 16384> chunk;
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    http::read_some(c.stream, c.buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec == http::error::end_of_stream || ec == asio::error::eof) {
      // Connection closed: with no Content-Length and no chunking this ends the body.
      ec = {};
      size_t got = chunk.size() - parser.get().body().size;
      if (got > 0) {
        if (ok) on_body(std::string_view(chunk.data(), got));
        else if (error_body) error_body->append(chunk.data(), got);
      }
      break;
    }
    if (ec) Fail(params_, "read body", ec);
    size_t got = chunk.size() - parser.get().body().size;
    if (got == 0) continue;
    if (ok) on_body(std::string_view(chunk.data(), got));
    else if (error_body) error_body->append(chunk.data(), got);
  }
  c.stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return status;
}

}  // namespace pg::bench
