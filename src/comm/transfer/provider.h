// The transport under the TransferEngine: one Provider is one fabric domain with one or more
// reliable-datagram endpoints. Every method is called by whichever thread holds the engine's
// fabric lock for the domain (the progress thread, a direct-posting caller, a polling waiter),
// one at a time, so implementations need no locking (libfabric FI_THREAD_DOMAIN).
//
// Posting never blocks: a full send queue returns PostResult::kAgain and the engine keeps the
// work item queued (backpressure) while it keeps polling every endpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pg::comm {

struct ProviderConfig {
  std::string provider = "tcp;ofi_rxm";  // libfabric provider name ("shm", "efa", ...)
  std::string local_host;                // bind address/interface host; "" = provider default
  uint32_t endpoints_per_domain = 1;
  size_t cq_entries = 4096;
};

// What the provider negotiated; the engine follows it.
struct ProviderInfo {
  std::string provider;      // exact provider name reported by libfabric
  std::string fabric;
  size_t max_msg_bytes = 0;
  size_t name_bytes = 0;     // raw endpoint name length
  bool mr_virt_addr = false; // remote addresses are virtual addresses (else offsets)
  bool mr_prov_key = false;  // provider picks keys (else the caller's requested key is used)
  bool mr_local = false;     // local buffers need a descriptor
  bool mr_endpoint = false;  // registrations bind to each endpoint
  size_t inject_bytes = 0;
};

using PeerAddr = uint64_t;  // fi_addr_t of one remote endpoint

struct LocalRegion {
  void* handle = nullptr;        // provider's registration (fid_mr*)
  void* desc = nullptr;          // local descriptor for ops when mr_local
  uint64_t key = 0;              // protection key peers use
};

// One RMA write; `data` is carried as remote CQ data when has_imm.
struct WriteOp {
  const void* src = nullptr;
  size_t length_bytes = 0;
  void* src_desc = nullptr;
  PeerAddr dst = 0;
  uint64_t dst_addr = 0;  // virtual address or offset, per mr_virt_addr
  uint64_t dst_key = 0;
  bool has_imm = false;
  uint32_t imm = 0;
};

struct MsgOp {
  void* buf = nullptr;
  size_t length_bytes = 0;
  void* desc = nullptr;
  PeerAddr peer = 0;  // ignored for receives (any source)
};

enum class PostResult { kPosted, kAgain };

// Every posted context must begin with this many bytes the provider may use (fi_context2).
inline constexpr size_t kProviderContextBytes = 64;

struct ProviderEvent {
  enum Kind { kLocalDone, kLocalError, kRemoteImm, kRecvDone } kind = kLocalDone;
  void* context = nullptr;  // the context the op was posted with (null for kRemoteImm)
  uint32_t imm = 0;         // kRemoteImm
  size_t length_bytes = 0;  // kRecvDone
  std::string error;        // kLocalError
};

class Provider {
 public:
  virtual ~Provider() = default;
  virtual const ProviderInfo& info() const = 0;
  virtual uint32_t num_endpoints() const = 0;
  // Raw names of all endpoints, concatenated ([num_endpoints][name_bytes]).
  virtual std::vector<uint8_t> LocalNames() = 0;
  // Inserts one remote endpoint name; returns its address for posting.
  virtual PeerAddr InsertPeer(std::span<const uint8_t> name) = 0;
  // Registers [base, base+len). remote: peers may write it. requested_key is used when the
  // provider lets the caller choose keys.
  virtual LocalRegion Register(void* base, size_t length_bytes, bool remote,
                               uint64_t requested_key) = 0;
  virtual void Deregister(const LocalRegion& region) = 0;
  // Posting on endpoint `ep`; context must stay alive until its completion is polled.
  virtual PostResult PostWrite(uint32_t ep, const WriteOp& op, void* context) = 0;
  // A write of at most info().inject_bytes whose source may be reused on return and that
  // produces no local completion (fi_inject_write[data]): for writes nobody waits on.
  virtual PostResult InjectWrite(uint32_t ep, const WriteOp& op) = 0;
  virtual PostResult PostSend(uint32_t ep, const MsgOp& op, void* context) = 0;
  virtual PostResult PostRecv(uint32_t ep, const MsgOp& op, void* context) = 0;
  // Reads completions of every endpoint (and drives provider progress); appends to `out`.
  virtual size_t Poll(std::vector<ProviderEvent>& out) = 0;
};

// Opens a libfabric domain. Throws pg::Error (kUnsupported/kIo) when the provider is absent
// or lacks FI_RMA | FI_MSG with remote CQ data on RDM endpoints.
std::unique_ptr<Provider> OpenLibfabricProvider(const ProviderConfig& config);

}  // namespace pg::comm
