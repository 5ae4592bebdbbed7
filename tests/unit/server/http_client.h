// Minimal blocking HTTP/1.1 client for server tests (Boost.Beast), with keep-alive and SSE
// event splitting. Independent of the server code: it only speaks the wire protocol.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace pg::server::testing {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

struct HttpResult {
  int status = 0;
  std::string content_type;
  std::string body;
  bool keep_alive = false;
  nlohmann::json Json() const { return nlohmann::json::parse(body); }
  // SSE "data: ..." payloads in order.
  std::vector<std::string> Events() const {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
      const size_t end = body.find("\n\n", pos);
      out.push_back(body.substr(pos + 6, end - pos - 6));
      pos = end + 2;
    }
    return out;
  }
};

class HttpClient {
 public:
  explicit HttpClient(uint16_t port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  }
  HttpResult Send(http::verb verb, const std::string& target, const std::string& body = {},
                  const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    http::write(socket_, req);
    return Read();
  }
  HttpResult Post(const std::string& target, const nlohmann::json& body,
                  const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    return Send(http::verb::post, target, body.dump(), headers);
  }
  HttpResult Get(const std::string& target) { return Send(http::verb::get, target); }
  HttpResult Read() {
    http::response_parser<http::string_body> parser;
    parser.body_limit(1u << 30);
    http::read(socket_, buffer_, parser);
    auto res = parser.release();
    HttpResult r;
    r.status = res.result_int();
    r.content_type = std::string(res[http::field::content_type]);
    r.body = res.body();
    r.keep_alive = res.keep_alive();
    return r;
  }
  tcp::socket& socket() { return socket_; }

 private:
  boost::asio::io_context ioc_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

}  // namespace pg::server::testing
