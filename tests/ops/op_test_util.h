// Shared helpers of the op harness: random inputs, comparison against ref/ at a stated
// tolerance, and enumeration of the registered backends of an op.
//
// Every backend of every op is run on the same inputs as the reference; a backend whose
// capability predicate rejects a case does not run it, but each backend must accept at
// least one case of its op (Coverage), so nothing is skipped silently.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/registry.h"

namespace pg::ops::testing {

// A fresh seed per process, printed with every failure (PG_SEED_TRACE) so a run can be
// replayed: PG_TEST_SEED=<seed> fixes it (the same test filter replays the same draws).
inline uint64_t Seed() {
  static const uint64_t seed = [] {
    const char* v = std::getenv("PG_TEST_SEED");
    return v != nullptr && v[0] != '\0' ? uint64_t(std::strtoull(v, nullptr, 10))
                                         : uint64_t(std::random_device{}());
  }();
  return seed;
}

inline std::mt19937_64& Rng() {
  static std::mt19937_64 rng(Seed());
  return rng;
}

inline void FillNormal(const Tensor& t, float mean = 0.0f, float stddev = 1.0f) {
  std::normal_distribution<float> dist(mean, stddev);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(Rng());
}
inline void FillUniform(const Tensor& t, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(Rng());
}
inline int64_t RandInt(int64_t lo, int64_t hi) {  // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(Rng());
}

inline std::vector<float> Copy(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}
inline void Restore(const Tensor& t, const std::vector<float>& v) {
  std::memcpy(t.data<float>(), v.data(), v.size() * sizeof(float));
}

// Error of `got` against `ref`, relative to the output scale rms(ref):
//   max_rel = max|got - ref| / rms(ref);  nmse = Σ(got - ref)² / Σ ref².
struct Tolerance {
  double max_rel;
  double nmse;
};

inline void ExpectClose(const float* ref, const float* got, int64_t n, Tolerance tol,
                        const std::string& what) {
  double ss_ref = 0, ss_err = 0, max_err = 0;
  int64_t worst = 0, bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) ++bad;
    double e = std::fabs(double(got[i]) - double(ref[i]));
    ss_ref += double(ref[i]) * ref[i];
    ss_err += e * e;
    if (e > max_err) max_err = e, worst = i;
  }
  ASSERT_GT(ss_ref, 0.0) << what << ": reference output is all zeros (bad test input)";
  const double rms = std::sqrt(ss_ref / double(n));
  const double max_rel = max_err / rms, nmse = ss_err / ss_ref;
  EXPECT_EQ(bad, 0) << what << ": non-finite outputs";
  EXPECT_LE(max_rel, tol.max_rel) << what << ": worst at " << worst << " ref " << ref[worst]
                                  << " got " << got[worst] << " (rms " << rms << ")";
  EXPECT_LE(nmse, tol.nmse) << what;
}

inline void ExpectExact(const float* ref, const float* got, int64_t n, const std::string& what) {
  int64_t mismatches = 0, first = -1;
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(&ref[i], &got[i], sizeof(float)) != 0 && !(ref[i] == got[i]))
      if (mismatches++ == 0) first = i;
  EXPECT_EQ(mismatches, 0) << what << ": first at " << first << " ref "
                           << (first >= 0 ? ref[first] : 0) << " got "
                           << (first >= 0 ? got[first] : 0);
}

// The implementations the harness checks against ref: every registered one but ref itself.
template <typename P>
std::vector<const KernelImpl<P>*> Backends() {
  std::vector<const KernelImpl<P>*> out;
  for (const auto& k : Registry::Global().table<P>().all())
    if (k.backend != "ref") out.push_back(&k);
  return out;
}

template <typename P>
const KernelImpl<P>& RefImpl() {
  const KernelImpl<P>* k = Registry::Global().table<P>().Find("ref");
  EXPECT_NE(k, nullptr);
  return *k;
}

// Whether backend `k` can run params `p` (its device and predicate).
template <typename P>
bool Accepts(const KernelImpl<P>& k, const P& p) {
  return k.device == DeviceOf(p) && (!k.supports || k.supports(p));
}

// Counts the cases each backend ran; Check() fails for a backend that ran none.
class Coverage {
 public:
  void Ran(const std::string& backend) { ++runs_[backend]; }
  int Runs(const std::string& backend) const {
    const auto it = runs_.find(backend);
    return it == runs_.end() ? 0 : it->second;
  }
  template <typename P>
  void Check() const {
    for (const KernelImpl<P>* k : Backends<P>()) {
      // Device backends run through the device mirror (device_mirror.h) and count the same.
      auto it = runs_.find(k->backend);
      EXPECT_TRUE(it != runs_.end() && it->second > 0)
          << "backend " << k->backend << " accepted none of the harness cases";
    }
  }

 private:
  std::map<std::string, int> runs_;
};

// ---- device backends ----------------------------------------------------------------------
// Device backends compute on bf16 activations (ops.h): the device mirror rounds the f32 case
// tensors to bf16 on the way in and widens the results on the way out, so a device result is
// held against ref at bf16 tolerance (input and output rounding; f32 accumulation), and an
// "exact" op against ref's result rounded to bf16.
constexpr Tolerance kBf16{3e-2, 5e-5};
// Attention: in a long prefill the first rows attend to a few keys, so |out| there reaches
// ~20x rms(out), and bf16 output rounding alone (2^-9 of |out|) is ~0.04 of rms; nmse is the
// tight check (a wrong mask or page gives nmse ~1).
constexpr Tolerance kBf16Attention{1e-1, 1e-4};

template <typename P>
bool OnDevice(const KernelImpl<P>& k) {
  return k.device != Device::kCpu;
}

inline float RoundBf16(float v) { return Bf16ToF32(F32ToBf16(v)); }
inline std::vector<float> RoundBf16(const float* p, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = RoundBf16(p[i]);
  return out;
}
// Makes an f32 tensor's values bf16-representable (so exact ops stay exact on bf16 devices).
inline void RoundToBf16(const Tensor& t) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = RoundBf16(p[i]);
}

// Exact on the CPU; on a device, exact against ref rounded to bf16.
template <typename P>
void ExpectExactFor(const KernelImpl<P>& k, const float* ref, const float* got, int64_t n,
                    const std::string& what) {
  if (!OnDevice(k)) return ExpectExact(ref, got, n, what);
  const std::vector<float> r = RoundBf16(ref, n);
  ExpectExact(r.data(), got, n, what);
}

// A tolerance for outputs whose error is a fraction `rel_of_value` of their own size (bf16
// roundings): base.max_rel (a fraction of rms), widened to rel_of_value * max|ref| / rms +
// slack where the largest outputs sit far above the rms.
inline Tolerance MagnitudeScaledTolerance(const Tensor& ref, Tolerance base, double rel_of_value,
                                          double slack = 0.0) {
  double ss = 0, mx = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double v = ref.data<float>()[i];
    ss += v * v, mx = std::max(mx, std::fabs(v));
  }
  const double rms = std::sqrt(ss / double(std::max<int64_t>(ref.numel(), 1)));
  return {std::max(base.max_rel, rms > 0 ? mx / rms * rel_of_value + slack : 0.0), base.nmse};
}

// An op's L2 hint (params.*hint: the bytes its caller reads next, no effect on results) is
// checked like any input: a contiguous host tensor is taken (a host backend runs as without
// it), a strided view or one on another device is rejected. run(params) runs the op.
template <typename P, typename Run>
void ExpectL2HintChecked(P params, TensorView P::*hint, Run run) {
  Tensor w(DType::kF32, {16, 8});
  params.*hint = w.view();
  EXPECT_NO_THROW(run(params));
  TensorView columns = w.view();  // the first 4 of 8 columns: rows 8 apart, not contiguous
  columns.shape[1] = 4;
  params.*hint = columns;
  EXPECT_THROW(run(params), Error);
  TensorView elsewhere = w.view();
  elsewhere.device = Device::kCuda;
  params.*hint = elsewhere;
  EXPECT_THROW(run(params), Error);
}

#define PG_SEED_TRACE() SCOPED_TRACE(::testing::Message() << "seed " << ::pg::ops::testing::Seed())

}  // namespace pg::ops::testing

// RunBackend: runs a backend on host-tensor params, through the device mirror when needed.
#include "device_mirror.h"  // NOLINT(build/include_order): needs the helpers above
