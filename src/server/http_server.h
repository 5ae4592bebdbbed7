// Asynchronous HTTP/1.1 server on Boost.Beast: a fixed pool of I/O threads running one
// io_context, one strand per connection (no thread per connection), keep-alive, request
// bodies capped (413), SSE streaming with chunked transfer encoding, and disconnect
// detection while a request is being served (so generation can be aborted).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace pg::server {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;

// One in-flight exchange on a connection. Every method is thread-safe: it is posted onto the
// connection's strand, so calls from one thread are applied in call order. Exactly one of
// Respond() or StartStream()...EndStream() must be used per exchange.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual void Respond(int status, std::string content_type, std::string body) = 0;
  virtual void StartStream() = 0;              // 200 text/event-stream, chunked
  virtual void SendEvent(std::string data) = 0;  // one SSE event: "data: <data>\n\n"
  virtual void EndStream() = 0;
  // Runs fn on the connection strand (serialises per-request state with the I/O).
  virtual void Post(std::function<void()> fn) = 0;
  // fn runs once, on the strand, if the client goes away before the exchange completes.
  virtual void OnDisconnect(std::function<void()> fn) = 0;
};

using HttpHandler = std::function<void(HttpRequest&& request, std::shared_ptr<Exchange> exchange)>;

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;          // 0: pick a free port (see HttpServer::port())
  int num_io_threads = 2;
  size_t max_body_bytes = 8u << 20;
  int idle_timeout_s = 120;      // keep-alive connection with no request
};

class HttpServer {
 public:
  HttpServer(HttpServerConfig config, HttpHandler handler);
  ~HttpServer();
  void Start();          // binds, listens, starts the I/O threads; throws pg::Error on failure
  void StopAccepting();  // closes the listening socket; live connections continue
  void Stop();           // stops the io_context and joins the threads
  uint16_t port() const { return bound_port_; }
  boost::asio::io_context& io_context() { return ioc_; }

 private:
  struct Impl;
  HttpServerConfig config_;
  HttpHandler handler_;
  boost::asio::io_context ioc_;
  std::unique_ptr<Impl> impl_;
  std::vector<std::thread> threads_;
  uint16_t bound_port_ = 0;
};

}  // namespace pg::server
