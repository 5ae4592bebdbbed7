// libfabric implementation of Provider: RDM endpoints with FI_MSG | FI_RMA, writes with
// remote CQ data, following whatever MR mode the provider returns.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <cstring>

#include "comm/transfer/fabric_check.h"
#include "comm/transfer/provider.h"
#include "comm/transfer/shm_names.h"
#include "core/log.h"

namespace pg::comm {
namespace {

static_assert(sizeof(fi_context2) <= kProviderContextBytes);
constexpr size_t kNameBytes = 128;  // every provider's raw name fits (tcp 16, efa 32, shm < 64)

class LibfabricProvider final : public Provider {
 public:
  explicit LibfabricProvider(const ProviderConfig& config) {
    PG_ENSURE(config.endpoints_per_domain >= 1, kInvalidArgument,
              "endpoints_per_domain must be >= 1");
    fi_info* hints = fi_allocinfo();
    PG_CHECK(hints != nullptr);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_SEND | FI_RECV;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    // Every MR mode bit we know how to honour; the provider keeps the ones it needs.
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->fabric_attr->prov_name = strdup(config.provider.c_str());
    const char* node = config.local_host.empty() ? nullptr : config.local_host.c_str();
    int ret = fi_getinfo(FI_VERSION(1, 17), node, nullptr, node ? FI_SOURCE : 0, hints, &info_);
    fi_freeinfo(hints);
    PG_ENSURE(ret == 0 && info_ != nullptr, kUnsupported,
              "libfabric provider '{}' (host '{}') offers no RDM endpoint with FI_MSG|FI_RMA: {}",
              config.provider, config.local_host, fi_strerror(-ret));
    PG_ENSURE(info_->domain_attr->cq_data_size >= 4, kUnsupported,
              "provider '{}' carries only {} bytes of remote CQ data", config.provider,
              info_->domain_attr->cq_data_size);
    PG_ENSURE(!(info_->rx_attr->mode & FI_RX_CQ_DATA), kUnsupported,
              "provider '{}' needs FI_RX_CQ_DATA (receive buffers for immediates)",
              config.provider);
    const uint64_t mr_mode = uint64_t(info_->domain_attr->mr_mode);
    info_out_.provider = info_->fabric_attr->prov_name;
    info_out_.fabric = info_->fabric_attr->name ? info_->fabric_attr->name : "";
    info_out_.max_msg_bytes = info_->ep_attr->max_msg_size;
    info_out_.mr_virt_addr = mr_mode & FI_MR_VIRT_ADDR;
    info_out_.mr_prov_key = mr_mode & FI_MR_PROV_KEY;
    info_out_.mr_local = mr_mode & FI_MR_LOCAL;
    info_out_.mr_endpoint = mr_mode & FI_MR_ENDPOINT;
    info_out_.inject_bytes = info_->tx_attr->inject_size;

    PG_FI_CHECK(fi_fabric(info_->fabric_attr, &fabric_, nullptr));
    PG_FI_CHECK(fi_domain(fabric_, info_, &domain_, nullptr));
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    PG_FI_CHECK(fi_av_open(domain_, &av_attr, &av_, nullptr));
    const bool shm = info_out_.provider == "shm";  // regions in /dev/shm: shm_names.h
    if (shm) RemoveStaleShmRegions();
    for (uint32_t i = 0; i < config.endpoints_per_domain; ++i) {
      Endpoint e;
      fi_cq_attr cq_attr{};
      cq_attr.format = FI_CQ_FORMAT_DATA;
      cq_attr.size = config.cq_entries;
      cq_attr.wait_obj = FI_WAIT_NONE;
      PG_FI_CHECK(fi_cq_open(domain_, &cq_attr, &e.cq, nullptr));
      PG_FI_CHECK(fi_endpoint(domain_, info_, &e.ep, nullptr));
      PG_FI_CHECK(fi_ep_bind(e.ep, &av_->fid, 0));
      PG_FI_CHECK(fi_ep_bind(e.ep, &e.cq->fid, FI_TRANSMIT | FI_RECV));
      if (shm) {
        std::string name = UniqueShmEndpointName(i);
        PG_FI_CHECK(fi_setname(&e.ep->fid, name.data(), name.size() + 1));
      }
      PG_FI_CHECK(fi_enable(e.ep));
      endpoints_.push_back(e);
    }
    // Names are padded to one fixed size so every rank agrees on it (shm names are strings
    // whose length varies with the pid).
    info_out_.name_bytes = kNameBytes;
    PG_LOG_INFO(
        "libfabric: provider {} fabric {} endpoints {} max_msg {} mr_mode virt_addr={} "
        "prov_key={} local={} endpoint={}",
        info_out_.provider, info_out_.fabric, endpoints_.size(), info_out_.max_msg_bytes,
        info_out_.mr_virt_addr, info_out_.mr_prov_key, info_out_.mr_local,
        info_out_.mr_endpoint);
  }

  ~LibfabricProvider() override {
    for (auto& e : endpoints_) {
      if (e.ep) fi_close(&e.ep->fid);
      if (e.cq) fi_close(&e.cq->fid);
    }
    if (av_) fi_close(&av_->fid);
    if (domain_) fi_close(&domain_->fid);
    if (fabric_) fi_close(&fabric_->fid);
    if (info_) fi_freeinfo(info_);
  }

  const ProviderInfo& info() const override { return info_out_; }
  uint32_t num_endpoints() const override { return uint32_t(endpoints_.size()); }

  std::vector<uint8_t> LocalNames() override {
    std::vector<uint8_t> out(endpoints_.size() * kNameBytes, 0);
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      size_t len = kNameBytes - 1;  // keep a NUL after string names
      PG_FI_CHECK(fi_getname(&endpoints_[i].ep->fid, out.data() + i * kNameBytes, &len));
    }
    return out;
  }

  PeerAddr InsertPeer(std::span<const uint8_t> name) override {
    PG_ENSURE(name.size() == info_out_.name_bytes, kMalformed,
              "endpoint name of {} bytes, provider {} uses {}", name.size(), info_out_.provider,
              info_out_.name_bytes);
    fi_addr_t addr = FI_ADDR_UNSPEC;
    int ret = fi_av_insert(av_, name.data(), 1, &addr, 0, nullptr);
    PG_ENSURE(ret == 1 && addr != FI_ADDR_UNSPEC, kMalformed,
              "fi_av_insert rejected a peer address ({})", ret);
    return addr;
  }

  LocalRegion Register(void* base, size_t length_bytes, bool remote,
                       uint64_t requested_key) override {
    uint64_t access = FI_WRITE | FI_SEND | FI_RECV;
    if (remote) access |= FI_REMOTE_WRITE;
    fid_mr* mr = nullptr;
    PG_FI_CHECK(fi_mr_reg(domain_, base, length_bytes, access, 0, requested_key, 0, &mr,
                          nullptr));
    if (info_out_.mr_endpoint) {
      for (auto& e : endpoints_) PG_FI_CHECK(fi_mr_bind(mr, &e.ep->fid, 0));
      PG_FI_CHECK(fi_mr_enable(mr));
    }
    LocalRegion r;
    r.handle = mr;
    r.desc = fi_mr_desc(mr);
    r.key = fi_mr_key(mr);
    PG_ENSURE(r.key != FI_KEY_NOTAVAIL, kUnsupported, "provider returned no MR key");
    return r;
  }

  void Deregister(const LocalRegion& region) override {
    if (region.handle) fi_close(&static_cast<fid_mr*>(region.handle)->fid);
  }

  PostResult PostWrite(uint32_t ep, const WriteOp& op, void* context) override {
    iovec iov{const_cast<void*>(op.src), op.length_bytes};
    void* desc = op.src_desc;
    fi_rma_iov rma{op.dst_addr, op.length_bytes, op.dst_key};
    fi_msg_rma msg{};
    msg.msg_iov = &iov;
    msg.desc = &desc;
    msg.iov_count = 1;
    msg.addr = op.dst;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    msg.context = context;
    msg.data = op.imm;
    uint64_t flags = FI_COMPLETION | (op.has_imm ? FI_REMOTE_CQ_DATA : 0);
    return Check(fi_writemsg(Ep(ep), &msg, flags), "fi_writemsg");
  }

  PostResult InjectWrite(uint32_t ep, const WriteOp& op) override {
    if (op.has_imm) {
      return Check(fi_inject_writedata(Ep(ep), op.src, op.length_bytes, op.imm, op.dst,
                                       op.dst_addr, op.dst_key),
                   "fi_inject_writedata");
    }
    return Check(fi_inject_write(Ep(ep), op.src, op.length_bytes, op.dst, op.dst_addr,
                                 op.dst_key),
                 "fi_inject_write");
  }

  PostResult PostSend(uint32_t ep, const MsgOp& op, void* context) override {
    return Check(fi_send(Ep(ep), op.buf, op.length_bytes, op.desc, op.peer, context), "fi_send");
  }

  PostResult PostRecv(uint32_t ep, const MsgOp& op, void* context) override {
    return Check(fi_recv(Ep(ep), op.buf, op.length_bytes, op.desc, FI_ADDR_UNSPEC, context),
                 "fi_recv");
  }

  size_t Poll(std::vector<ProviderEvent>& out) override {
    size_t n_total = 0;
    fi_cq_data_entry entries[64];
    for (auto& e : endpoints_) {
      for (;;) {
        ssize_t n = fi_cq_read(e.cq, entries, 64);
        if (n == -FI_EAGAIN) break;
        if (n == -FI_EAVAIL) {
          fi_cq_err_entry err{};
          if (fi_cq_readerr(e.cq, &err, 0) != 1) break;
          ProviderEvent ev;
          ev.kind = ProviderEvent::kLocalError;
          ev.context = err.op_context;
          char buf[256] = {0};
          const char* s = fi_cq_strerror(e.cq, err.prov_errno, err.err_data, buf, sizeof(buf));
          ev.error = fmt::format("{} (err {}, provider: {})", fi_strerror(err.err), err.err,
                                 s ? s : "");
          if (err.flags & FI_REMOTE_CQ_DATA && err.op_context == nullptr) {
            PG_LOG_WARN("libfabric: errored remote completion: {}", ev.error);
            continue;
          }
          out.push_back(std::move(ev));
          ++n_total;
          continue;
        }
        PG_ENSURE(n >= 0, kIo, "fi_cq_read failed: {}", fi_strerror(int(-n)));
        for (ssize_t i = 0; i < n; ++i) {
          const auto& c = entries[i];
          ProviderEvent ev;
          ev.context = c.op_context;
          if ((c.flags & FI_REMOTE_CQ_DATA) && !(c.flags & FI_RECV && c.op_context)) {
            ev.kind = ProviderEvent::kRemoteImm;
            ev.imm = uint32_t(c.data);
            ev.context = nullptr;
          } else if (c.flags & FI_RECV) {
            ev.kind = ProviderEvent::kRecvDone;
            ev.length_bytes = c.len;
          } else {
            ev.kind = ProviderEvent::kLocalDone;
          }
          out.push_back(std::move(ev));
        }
        n_total += size_t(n);
        if (n < 64) break;
      }
    }
    return n_total;
  }

 private:
  struct Endpoint {
    fid_ep* ep = nullptr;
    fid_cq* cq = nullptr;
  };

  fid_ep* Ep(uint32_t i) {
    PG_CHECK(i < endpoints_.size(), "endpoint {} of {}", i, endpoints_.size());
    return endpoints_[i].ep;
  }

  static PostResult Check(ssize_t ret, const char* what) {
    if (ret == 0) return PostResult::kPosted;
    if (ret == -FI_EAGAIN) return PostResult::kAgain;
    Throw(ErrorCode::kIo, "{} failed: {}", what, fi_strerror(int(-ret)));
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  std::vector<Endpoint> endpoints_;
  ProviderInfo info_out_;
};

}  // namespace

std::unique_ptr<Provider> OpenLibfabricProvider(const ProviderConfig& config) {
  return std::make_unique<LibfabricProvider>(config);
}

}  // namespace pg::comm
