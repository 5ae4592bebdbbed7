// Bootstrap: a TCP key-value store served by rank 0, through which ranks exchange endpoint
// addresses and memory descriptors (the mechanism multi-node launch uses too).
//
// Where the store is and who we are comes from one typed config, filled from flags or the
// environment: PEREGRINE_RANK / PEREGRINE_WORLD_SIZE / PEREGRINE_STORE_ADDR (host:port), or,
// under Open MPI's mpirun, OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (the store address
// still comes from PEREGRINE_STORE_ADDR, passed with `mpirun -x`).
//
// Protocol (one TCP connection per client, requests answered in order):
//   request  = u8 op ('S' set | 'G' get) | u32 key_len | key | u32 value_len | value (set)
//   reply    = u8 status (0 ok, 1 timeout) | u32 value_len | value (get)
// A get blocks on the server until the key is set or the client's timeout (sent as the
// value: u32 milliseconds) passes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pg::comm {

struct BootstrapConfig {
  int rank = -1;
  int world_size = 0;
  std::string store_host = "127.0.0.1";
  uint16_t store_port = 0;
  std::chrono::milliseconds timeout{30'000};
};

// Fills unset fields of `base` (rank < 0, world_size 0, store_port 0) from PEREGRINE_* or
// OMPI_* variables; throws kInvalidArgument when rank, world size or store address stay
// unknown or inconsistent.
BootstrapConfig BootstrapFromEnv(BootstrapConfig base);

class TcpStore {
 public:
  // Rank 0 serves on store_port (0 = pick a free port, see port()) and also acts as a client.
  explicit TcpStore(const BootstrapConfig& config);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  uint16_t port() const;
  void Set(const std::string& key, const std::vector<uint8_t>& value);
  // Blocks until the key exists; throws kCancelled on timeout, kIo on a lost connection.
  std::vector<uint8_t> Get(const std::string& key);
  // Every rank publishes `value` under prefix/rank and receives all ranks' values in order.
  std::vector<std::vector<uint8_t>> AllGather(const std::string& prefix,
                                              const std::vector<uint8_t>& value);
  // Ranks meet; `name` must be unique per use.
  void Barrier(const std::string& name);
  // Collective, last call before destruction: rank 0 (whose destructor stops the server)
  // returns only once every other rank has made its last request.
  void Finalize();

 private:
  struct Server;
  BootstrapConfig config_;
  std::unique_ptr<Server> server_;
  int fd_ = -1;
};

}  // namespace pg::comm
