#include "server/http_server.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>

#include "core/log.h"
#include "core/status.h"

namespace pg::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// A connection. Invariants: at most one read and one write are outstanding; all members are
// touched only on the strand (the tcp_stream's executor); `exchange_active_` is true from the
// dispatch of a request until its response (or stream end) is fully written.
class Session : public Exchange, public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const HttpServerConfig& config, const HttpHandler& handler)
      : stream_(std::move(socket)), config_(config), handler_(handler) {}

  void Begin() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->DoRead(); });
  }

  void Respond(int status, std::string content_type, std::string body) override {
    Post([self = shared_from_this(), status, ct = std::move(content_type),
          b = std::move(body)]() mutable { self->DoRespond(status, std::move(ct), std::move(b)); });
  }
  void StartStream() override {
    Post([self = shared_from_this()] {
      if (self->closed_) return;
      std::string head =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
          "Transfer-Encoding: chunked\r\nConnection: ";
      head += self->keep_alive_ ? "keep-alive\r\n\r\n" : "close\r\n\r\n";
      self->Queue(std::move(head));
    });
  }
  void SendEvent(std::string data) override {
    Post([self = shared_from_this(), d = std::move(data)] {
      if (self->closed_) return;
      std::string payload = "data: " + d + "\n\n";
      self->Queue(fmt::format("{:x}\r\n{}\r\n", payload.size(), payload));
    });
  }
  void EndStream() override {
    Post([self = shared_from_this()] {
      if (self->closed_) return;
      self->Queue("0\r\n\r\n", /*ends_exchange=*/true);
    });
  }
  void Post(std::function<void()> fn) override { asio::post(stream_.get_executor(), std::move(fn)); }
  void OnDisconnect(std::function<void()> fn) override {
    Post([self = shared_from_this(), f = std::move(fn)]() mutable {
      if (self->closed_ && self->exchange_active_) {
        f();
      } else {
        self->on_disconnect_ = std::move(f);
      }
    });
  }

 private:
  void DoRead() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(config_.max_body_bytes);
    stream_.expires_after(std::chrono::seconds(config_.idle_timeout_s));
    http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](
                                                            beast::error_code ec, size_t) {
      self->OnHeader(ec);
    });
  }

  // curl and other clients send "Expect: 100-continue" for larger bodies and wait (curl: 1 s)
  // for the interim response before sending the body.
  void OnHeader(beast::error_code ec) {
    if (ec) return OnRead(ec);
    const auto& h = parser_->get();
    if (!parser_->is_done() && beast::iequals(h[http::field::expect], "100-continue")) {
      auto interim = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      asio::async_write(stream_, asio::buffer(*interim),
                        [self = shared_from_this(), interim](beast::error_code wec, size_t) {
                          if (wec) return self->Close();
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      exchange_active_ = true;
      DoRespond(413, "application/json",
                R"({"error":{"message":"request body exceeds the limit","type":"invalid_request_error","param":null,"code":"request_too_large"}})");
      return;
    }
    if (ec) {
      if (ec != http::error::end_of_stream && ec != beast::error::timeout &&
          ec != asio::error::connection_reset && ec != asio::error::operation_aborted) {
        // Malformed HTTP: answer 400 and close.
        if (ec.category() == http::make_error_code(http::error::bad_target).category()) {
          keep_alive_ = false;
          exchange_active_ = true;
          DoRespond(400, "application/json",
                    R"({"error":{"message":"malformed HTTP request","type":"invalid_request_error","param":null,"code":null}})");
          return;
        }
      }
      Close();
      return;
    }
    HttpRequest req = parser_->release();
    keep_alive_ = req.keep_alive();
    exchange_active_ = true;
    stream_.expires_never();  // generation may take long; disconnects are caught by WatchPeer
    handler_(std::move(req), shared_from_this());
    WatchPeer();
  }

  // While an exchange is active, keep one read outstanding: EOF or reset means the client
  // left. Bytes that arrive (a pipelined next request) are kept in buffer_ for DoRead.
  void WatchPeer() {
    if (closed_ || watching_) return;
    watching_ = true;
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->watching_ = false;
      if (ec) {
        self->PeerGone();
        return;
      }
      self->buffer_.commit(n);
      if (!self->exchange_active_) self->DoRead();
      // else: data is buffered; DoRead runs when the exchange completes.
    });
  }

  void PeerGone() {
    const bool was_active = exchange_active_;
    Close();
    if (was_active && on_disconnect_) {
      auto f = std::move(on_disconnect_);
      on_disconnect_ = nullptr;
      f();
    }
  }

  void DoRespond(int status, std::string content_type, std::string body) {
    if (closed_) return;
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "peregrine");
    res.set(http::field::content_type, content_type);
    res.keep_alive(keep_alive_);
    res.body() = std::move(body);
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    Queue(os.str(), /*ends_exchange=*/true);
  }

  void Queue(std::string bytes, bool ends_exchange = false) {
    out_.push_back({std::move(bytes), ends_exchange});
    if (!writing_) DoWrite();
  }

  void DoWrite() {
    if (closed_ || out_.empty()) {
      writing_ = false;
      return;
    }
    writing_ = true;
    asio::async_write(stream_, asio::buffer(out_.front().bytes),
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) {
                          self->writing_ = false;
                          self->PeerGone();
                          return;
                        }
                        const bool ends = self->out_.front().ends_exchange;
                        self->out_.pop_front();
                        if (ends) self->ExchangeDone();
                        self->DoWrite();
                      });
  }

  void ExchangeDone() {
    exchange_active_ = false;
    on_disconnect_ = nullptr;
    if (!keep_alive_) {
      beast::error_code ec;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      Close();
      return;
    }
    if (!watching_) DoRead();  // else the watch read completes first, then reads on
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    stream_.socket().close(ec);
  }

  struct Outgoing {
    std::string bytes;
    bool ends_exchange;
  };

  beast::tcp_stream stream_;
  const HttpServerConfig& config_;
  const HttpHandler& handler_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<Outgoing> out_;
  std::function<void()> on_disconnect_;
  bool keep_alive_ = true;
  bool exchange_active_ = false;
  bool writing_ = false;
  bool watching_ = false;
  bool closed_ = false;
};

}  // namespace

struct HttpServer::Impl {
  explicit Impl(asio::io_context& ioc) : acceptor(asio::make_strand(ioc)) {}
  tcp::acceptor acceptor;
  std::atomic<bool> accepting{true};
};

HttpServer::HttpServer(HttpServerConfig config, HttpHandler handler)
    : config_(std::move(config)), handler_(std::move(handler)), impl_(std::make_unique<Impl>(ioc_)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Start() {
  beast::error_code ec;
  const auto address = asio::ip::make_address(config_.host, ec);
  PG_ENSURE(!ec, kInvalidArgument, "bad listen address '{}': {}", config_.host, ec.message());
  tcp::endpoint endpoint{address, config_.port};
  auto& acc = impl_->acceptor;
  acc.open(endpoint.protocol(), ec);
  if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(endpoint, ec);
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  PG_ENSURE(!ec, kIo, "cannot listen on {}:{}: {}", config_.host, config_.port, ec.message());
  bound_port_ = acc.local_endpoint().port();

  auto accept_loop = std::make_shared<std::function<void()>>();
  *accept_loop = [this, accept_loop] {
    impl_->acceptor.async_accept(
        asio::make_strand(ioc_), [this, accept_loop](beast::error_code aec, tcp::socket socket) {
          if (aec) {
            if (!impl_->accepting.load() || aec == asio::error::operation_aborted) return;
            PG_LOG_WARN("accept failed: {}", aec.message());
          } else {
            beast::error_code nd;
            socket.set_option(tcp::no_delay(true), nd);
            std::make_shared<Session>(std::move(socket), config_, handler_)->Begin();
          }
          if (impl_->accepting.load()) (*accept_loop)();
        });
  };
  asio::post(impl_->acceptor.get_executor(), [accept_loop] { (*accept_loop)(); });
  const int n = std::max(1, config_.num_io_threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { ioc_.run(); });
  PG_LOG_INFO("listening on http://{}:{} ({} I/O threads)", config_.host, bound_port_, n);
}

void HttpServer::StopAccepting() {
  if (!impl_->accepting.exchange(false)) return;
  asio::post(impl_->acceptor.get_executor(), [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
}

void HttpServer::Stop() {
  StopAccepting();
  ioc_.stop();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

}  // namespace pg::server
