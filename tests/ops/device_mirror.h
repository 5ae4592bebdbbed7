// The op harness's device mirror: runs a backend of any device on params whose tensors live
// on the host (the harness's cases).
//
// For a device backend (CUDA builds), every tensor of the params is copied to the device —
// f32 activations / caches converted to bf16 (ops.h: activations are bf16 on CUDA), weights,
// ids and positions byte for byte — the backend runs there, and the op's outputs and in-place
// tensors come back into the host tensors (bf16 widened to f32). Strided views keep their
// strides on the device. Host tensors that alias (RmsNorm/Add in place) share one device copy.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/registry.h"

#if defined(PEREGRINE_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace pg::ops::testing {

#if defined(PEREGRINE_HAVE_CUDA)

#define PG_TEST_CUDA(expr)                                                              \
  do {                                                                                  \
    cudaError_t e_ = (expr);                                                            \
    if (e_ != cudaSuccess) throw Error(ErrorCode::kInternal, std::string(#expr ": ") +  \
                                                                 cudaGetErrorString(e_)); \
  } while (0)

class DeviceMirror {
 public:
  DeviceMirror() = default;
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;
  ~DeviceMirror() {
    for (Entry& e : entries_) cudaFree(e.device);
  }

  // An activation / cache: f32 on the host, bf16 on the device. copy_back: an output.
  TensorView Act(const TensorView& host, bool copy_back) { return Add(host, true, copy_back); }
  // Anything else (weights, ids, positions, bias): the same bytes on the device.
  TensorView Raw(const TensorView& host) { return Add(host, false, false); }
  // A non-activation output (router ids / weights): the same bytes, copied back.
  TensorView RawOut(const TensorView& host) { return Add(host, false, true); }
  // A KV cache: f32 host caches go to the device as bf16 activations; any other dtype (fp8
  // e4m3, bf16) as the same bytes. copy_back: the op writes it.
  TensorView Cache(const TensorView& host, bool copy_back) {
    return host.dtype == DType::kF32 ? Add(host, true, copy_back) : Add(host, false, copy_back);
  }

  // Device -> host for every output, after the backend ran (synchronises the device).
  void CopyBack() {
    PG_TEST_CUDA(cudaDeviceSynchronize());
    for (const Entry& e : entries_) {
      if (!e.copy_back) continue;
      if (!e.act) {  // raw bytes back
        PG_TEST_CUDA(cudaMemcpy(e.host, e.device, size_t(e.bytes), cudaMemcpyDeviceToHost));
        continue;
      }
      std::vector<uint16_t> tmp(static_cast<size_t>(e.span));
      PG_TEST_CUDA(cudaMemcpy(tmp.data(), e.device, size_t(e.span) * 2, cudaMemcpyDeviceToHost));
      float* h = static_cast<float*>(e.host);
      for (int64_t i = 0; i < e.span; ++i) h[i] = Bf16ToF32(tmp[size_t(i)]);
    }
  }

 private:
  struct Entry {
    void* host;
    void* device;
    int64_t span;  // elements from the first to one past the last
    bool act, copy_back;
    int64_t bytes = 0;  // raw entries: bytes copied
  };

  static int64_t Span(const TensorView& t) {
    if (t.numel() == 0) return 0;
    int64_t last = 0;
    for (int i = 0; i < t.ndim; ++i) last += (t.shape[i] - 1) * t.strides[i];
    return last + 1;
  }

  TensorView Add(const TensorView& host, bool act, bool copy_back) {
    if (!host.data) return host;
    TensorView d = host;
    d.device = Device::kCuda;
    if (act) {
      EXPECT_EQ(host.dtype, DType::kF32) << "device mirror: activation must be f32 on the host";
      d.dtype = DType::kBF16;
    }
    for (Entry& e : entries_)
      if (e.host == host.data && e.act == act) {  // an alias of a tensor already mirrored
        e.copy_back = e.copy_back || copy_back;
        d.data = e.device;
        return d;
      }
    const int64_t span = Span(host);
    Entry e{host.data, nullptr, span, act, copy_back};
    if (act) {
      std::vector<uint16_t> tmp(static_cast<size_t>(span));
      const float* h = host.as<float>();
      for (int64_t i = 0; i < span; ++i) tmp[size_t(i)] = F32ToBf16(h[i]);
      PG_TEST_CUDA(cudaMalloc(&e.device, size_t(span) * 2 + 16));
      PG_TEST_CUDA(cudaMemcpy(e.device, tmp.data(), size_t(span) * 2, cudaMemcpyHostToDevice));
    } else {
      // Bytes spanned: block types are contiguous here (row-major weights / tables).
      const int64_t bytes = host.is_contiguous() ? host.nbytes()
                                                 : Span(host) * Info(host.dtype).block_bytes /
                                                       Info(host.dtype).block_size;
      PG_TEST_CUDA(cudaMalloc(&e.device, size_t(bytes) + 16));
      PG_TEST_CUDA(cudaMemcpy(e.device, host.data, size_t(bytes), cudaMemcpyHostToDevice));
      e.bytes = bytes;
    }
    entries_.push_back(e);
    d.data = e.device;
    return d;
  }

  std::vector<Entry> entries_;
};

// The params' tensors on the device (per op: which are outputs).
inline EmbeddingParams Mirror(DeviceMirror& m, const EmbeddingParams& p) {
  return {m.Raw(p.table), m.Raw(p.ids), m.Act(p.out, true)};
}
inline RmsNormParams Mirror(DeviceMirror& m, const RmsNormParams& p) {
  RmsNormParams d = p;
  d.x = m.Act(p.x, false);
  d.out = m.Act(p.out, true);
  d.residual = m.Act(p.residual, true);
  d.weight = m.Raw(p.weight);
  return d;
}
inline RopeParams Mirror(DeviceMirror& m, const RopeParams& p) {
  return {m.Act(p.x, true), m.Raw(p.positions), p.config};
}
inline MatmulParams Mirror(DeviceMirror& m, const MatmulParams& p) {
  return {m.Act(p.x, false), m.Raw(p.w), m.Act(p.out, true), m.Raw(p.bias), m.Raw(p.w_scale), p.accumulate};
}
inline FusedMatmulParams Mirror(DeviceMirror& m, const FusedMatmulParams& p) {
  FusedMatmulParams d = p;
  d.x = m.Act(p.x, false);
  d.norm_weight = m.Raw(p.norm_weight);
  d.w = m.Raw(p.w);
  d.bias = m.Raw(p.bias);
  d.w_scale = m.Raw(p.w_scale);
  d.out = m.Act(p.out, true);
  d.normed = m.Act(p.normed, false);  // scratch
  d.projected = m.Act(p.projected, false);
  return d;
}
inline SwiGluParams Mirror(DeviceMirror& m, const SwiGluParams& p) {
  return {m.Act(p.gate, false), m.Act(p.up, false), m.Act(p.out, true)};
}
inline AddParams Mirror(DeviceMirror& m, const AddParams& p) {
  AddParams d;
  d.a = m.Act(p.a, false);
  d.b = m.Act(p.b, false);
  d.out = m.Act(p.out, true);
  return d;
}
inline KvCacheView Mirror(DeviceMirror& m, const KvCacheView& c) {
  return {m.Cache(c.k_cache, true), m.Cache(c.v_cache, true), c.k_scale, c.v_scale};
}
inline KvWriteParams Mirror(DeviceMirror& m, const KvWriteParams& p) {
  return {m.Act(p.k, false), m.Act(p.v, false), Mirror(m, p.cache), p.batch};
}
inline RopeKvWriteParams Mirror(DeviceMirror& m, const RopeKvWriteParams& p) {
  RopeKvWriteParams d = p;
  d.q = m.Act(p.q, true), d.k = m.Act(p.k, true), d.v = m.Act(p.v, false);
  d.positions = m.Raw(p.positions);
  d.cache = Mirror(m, p.cache);
  d.q_norm = m.Raw(p.q_norm), d.k_norm = m.Raw(p.k_norm);
  return d;
}
inline RopeKvWriteAttentionParams Mirror(DeviceMirror& m, const RopeKvWriteAttentionParams& p) {
  RopeKvWriteAttentionParams d = p;
  d.rope = Mirror(m, p.rope);
  d.out = m.Act(p.out, true);
  d.l2_after = m.Raw(p.l2_after);
  return d;
}
inline AttentionParams Mirror(DeviceMirror& m, const AttentionParams& p) {
  AttentionParams d = p;
  d.q = m.Act(p.q, false);
  d.out = m.Act(p.out, true);
  d.cache = {m.Cache(p.cache.k_cache, false), m.Cache(p.cache.v_cache, false), p.cache.k_scale,
             p.cache.v_scale};
  return d;
}

#endif  // PEREGRINE_HAVE_CUDA

// Runs backend `k` on host params `p`; returns false (nothing run) when `k` does not accept
// them. Device backends run on a device mirror of `p` and write their outputs back into p's
// host tensors. Errors the backend throws propagate.
template <typename P>
bool RunBackend(const KernelImpl<P>& k, const P& p) {
  if (k.device == Device::kCpu) {
    if (!Accepts(k, p)) return false;
    RunWith(k, p);
    return true;
  }
#if defined(PEREGRINE_HAVE_CUDA)
  DeviceMirror m;
  const P d = Mirror(m, p);
  if (!Accepts(k, d)) return false;
  RunWith(k, d);
  m.CopyBack();
  return true;
#else
  ADD_FAILURE() << k.backend << ": a device backend in a build without its device";
  return false;
#endif
}

}  // namespace pg::ops::testing
