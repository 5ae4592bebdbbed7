#include "comm/transfer/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "core/status.h"

namespace pg::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxValueBytes = 64u << 20;

// Full read/write; false on EOF or error.
bool ReadAll(int fd, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    p += r;
    n -= size_t(r);
  }
  return true;
}

bool WriteAll(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    p += r;
    n -= size_t(r);
  }
  return true;
}

bool WriteBlob(int fd, const void* data, uint32_t n) {
  return WriteAll(fd, &n, 4) && (n == 0 || WriteAll(fd, data, n));
}

bool ReadBlob(int fd, std::vector<uint8_t>& out, uint32_t max_bytes) {
  uint32_t n;
  if (!ReadAll(fd, &n, 4) || n > max_bytes) return false;
  out.resize(n);
  return n == 0 || ReadAll(fd, out.data(), n);
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int ParseInt(const std::string& s, const char* what) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  PG_ENSURE(!s.empty() && end && *end == '\0' && v >= 0 && v < (1 << 20), kInvalidArgument,
            "{}: '{}' is not a valid number", what, s);
  return int(v);
}

}  // namespace

BootstrapConfig BootstrapFromEnv(BootstrapConfig c) {
  if (c.rank < 0) {
    std::string r = Env("PEREGRINE_RANK");
    if (r.empty()) r = Env("OMPI_COMM_WORLD_RANK");
    if (!r.empty()) c.rank = ParseInt(r, "rank");
  }
  if (c.world_size <= 0) {
    std::string w = Env("PEREGRINE_WORLD_SIZE");
    if (w.empty()) w = Env("OMPI_COMM_WORLD_SIZE");
    if (!w.empty()) c.world_size = ParseInt(w, "world size");
  }
  if (c.store_port == 0) {
    std::string addr = Env("PEREGRINE_STORE_ADDR");
    if (!addr.empty()) {
      auto colon = addr.rfind(':');
      PG_ENSURE(colon != std::string::npos && colon > 0, kInvalidArgument,
                "PEREGRINE_STORE_ADDR '{}' is not host:port", addr);
      c.store_host = addr.substr(0, colon);
      int port = ParseInt(addr.substr(colon + 1), "store port");
      PG_ENSURE(port > 0 && port < 65536, kInvalidArgument, "store port {} out of range", port);
      c.store_port = uint16_t(port);
    }
  }
  PG_ENSURE(c.world_size >= 1, kInvalidArgument,
            "world size unknown: pass it or set PEREGRINE_WORLD_SIZE (or run under mpirun)");
  PG_ENSURE(c.rank >= 0 && c.rank < c.world_size, kInvalidArgument,
            "rank {} outside a world of {}", c.rank, c.world_size);
  PG_ENSURE(c.store_port != 0 || (c.rank == 0 && c.world_size == 1), kInvalidArgument,
            "store address unknown: set PEREGRINE_STORE_ADDR=host:port");
  return c;
}

struct TcpStore::Server {
  int listen_fd = -1;
  uint16_t port = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::vector<uint8_t>> kv;
  bool stop = false;
  std::vector<int> conns;
  std::vector<std::thread> threads;
  std::thread acceptor;

  void Serve(int fd) {
    for (;;) {
      uint8_t op;
      std::vector<uint8_t> key, value;
      if (!ReadAll(fd, &op, 1) || !ReadBlob(fd, key, kMaxKeyBytes) ||
          !ReadBlob(fd, value, kMaxValueBytes)) {
        return;
      }
      std::string k(key.begin(), key.end());
      if (op == 'S') {
        {
          std::lock_guard lock(mu);
          kv[k] = std::move(value);
        }
        cv.notify_all();
        uint8_t ok = 0;
        if (!WriteAll(fd, &ok, 1)) return;
      } else if (op == 'G' && value.size() == 4) {
        uint32_t timeout_ms;
        std::memcpy(&timeout_ms, value.data(), 4);
        std::unique_lock lock(mu);
        bool found = cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                 [&] { return stop || kv.count(k) > 0; });
        found = found && kv.count(k) > 0;
        std::vector<uint8_t> v = found ? kv[k] : std::vector<uint8_t>{};
        lock.unlock();
        uint8_t status = found ? 0 : 1;
        if (!WriteAll(fd, &status, 1) || !WriteBlob(fd, v.data(), uint32_t(v.size()))) return;
      } else {
        PG_LOG_WARN("rendezvous store: malformed request (op {}), dropping connection", op);
        return;
      }
    }
  }
};

TcpStore::TcpStore(const BootstrapConfig& config) : config_(config) {
  if (config.rank == 0) {
    server_ = std::make_unique<Server>();
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    PG_ENSURE(fd >= 0, kIo, "socket: {}", std::strerror(errno));
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(config.store_port);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(fd, 256) != 0) {
      int e = errno;
      ::close(fd);
      Throw(ErrorCode::kIo, "rendezvous store: cannot listen on port {}: {}", config.store_port,
            std::strerror(e));
    }
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    server_->listen_fd = fd;
    server_->port = ntohs(addr.sin_port);
    config_.store_port = server_->port;
    Server* s = server_.get();
    s->acceptor = std::thread([s] {
      for (;;) {
        int c = ::accept(s->listen_fd, nullptr, nullptr);
        if (c < 0) {
          if (errno == EINTR) continue;
          return;  // listening socket shut down
        }
        int one = 1;
        ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        std::lock_guard lock(s->mu);
        if (s->stop) {
          ::close(c);
          return;
        }
        s->conns.push_back(c);
        s->threads.emplace_back([s, c] { s->Serve(c); });
      }
    });
  }
  // Connect (rank 0 to itself too), retrying until the server is up or the timeout passes.
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(config_.store_port);
  int gai = ::getaddrinfo(config_.store_host.c_str(), port.c_str(), &hints, &res);
  PG_ENSURE(gai == 0 && res, kInvalidArgument, "rendezvous store host '{}': {}",
            config_.store_host, gai_strerror(gai));
  const auto deadline = Clock::now() + config_.timeout;
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      fd_ = fd;
      break;
    }
    int e = errno;
    if (fd >= 0) ::close(fd);
    if (Clock::now() > deadline) {
      ::freeaddrinfo(res);
      Throw(ErrorCode::kIo, "rendezvous store {}:{} unreachable: {}", config_.store_host,
            config_.store_port, std::strerror(e));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::freeaddrinfo(res);
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  if (server_) {
    {
      std::lock_guard lock(server_->mu);
      server_->stop = true;
      for (int c : server_->conns) ::shutdown(c, SHUT_RDWR);
    }
    server_->cv.notify_all();
    ::shutdown(server_->listen_fd, SHUT_RDWR);
    ::close(server_->listen_fd);
    server_->acceptor.join();
    for (auto& t : server_->threads) t.join();
    for (int c : server_->conns) ::close(c);
  }
}

uint16_t TcpStore::port() const { return config_.store_port; }

void TcpStore::Set(const std::string& key, const std::vector<uint8_t>& value) {
  uint8_t op = 'S', status = 1;
  bool ok = WriteAll(fd_, &op, 1) && WriteBlob(fd_, key.data(), uint32_t(key.size())) &&
            WriteBlob(fd_, value.data(), uint32_t(value.size())) && ReadAll(fd_, &status, 1);
  PG_ENSURE(ok && status == 0, kIo, "rendezvous store: set '{}' failed (connection lost)", key);
}

std::vector<uint8_t> TcpStore::Get(const std::string& key) {
  uint8_t op = 'G', status = 1;
  uint32_t timeout_ms = uint32_t(config_.timeout.count());
  std::vector<uint8_t> value;
  bool ok = WriteAll(fd_, &op, 1) && WriteBlob(fd_, key.data(), uint32_t(key.size())) &&
            WriteBlob(fd_, &timeout_ms, 4) && ReadAll(fd_, &status, 1) &&
            ReadBlob(fd_, value, kMaxValueBytes);
  PG_ENSURE(ok, kIo, "rendezvous store: get '{}' failed (connection lost)", key);
  PG_ENSURE(status == 0, kCancelled, "rendezvous store: key '{}' not set within {} ms", key,
            timeout_ms);
  return value;
}

std::vector<std::vector<uint8_t>> TcpStore::AllGather(const std::string& prefix,
                                                      const std::vector<uint8_t>& value) {
  Set(prefix + "/" + std::to_string(config_.rank), value);
  std::vector<std::vector<uint8_t>> all;
  for (int r = 0; r < config_.world_size; ++r) all.push_back(Get(prefix + "/" + std::to_string(r)));
  return all;
}

void TcpStore::Barrier(const std::string& name) { AllGather("barrier/" + name, {}); }

void TcpStore::Finalize() {
  if (config_.rank != 0) {
    // No wait for the reply: rank 0 may stop the server as soon as the request is read.
    const std::string key = "finalize/" + std::to_string(config_.rank);
    uint8_t op = 'S';
    bool ok = WriteAll(fd_, &op, 1) && WriteBlob(fd_, key.data(), uint32_t(key.size())) &&
              WriteBlob(fd_, nullptr, 0);
    PG_ENSURE(ok, kIo, "rendezvous store: finalize failed (connection lost)");
    return;
  }
  for (int r = 1; r < config_.world_size; ++r) Get("finalize/" + std::to_string(r));
}

}  // namespace pg::comm
