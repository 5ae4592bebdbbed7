// Matmul through OpenBLAS on f32 tiles of the weight, dequantized on the fly: the kernel of
// CPUs without AVX2 (elsewhere the row kernels of matmul_gemv.cpp rank above it). Tiles of
// kTileRows output features are spread over the thread pool; each runs single-threaded BLAS,
// so OpenBLAS's own threads are set to 1.
//
//   out[r, j0:j1] (= or +=) dequant(w[j0:j1, k]) · x[r, k] (+ bias[j0:j1]), one sgemv per row:
// sgemm's result for a row depends on how many rows share the call (its n = 1 and small-n
// paths sum differently), which would break batch invariance (docs/design/engine.md).
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_util.h"

namespace pg::ops::cpu {
namespace {

constexpr int64_t kTileRows = 128;  // weight rows per tile (f32 tile of 128 x k)

void GemmBlas(const MatmulParams& p) {
  const int64_t n = p.x.dim(0), k = p.x.dim(1), m = p.w.dim(0);
  const int64_t num_tiles = (m + kTileRows - 1) / kTileRows;
  ThreadPool::Default().ParallelFor(num_tiles, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> tile;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t j0 = t * kTileRows, rows = std::min(kTileRows, m - j0);
      const float* wf;
      if (p.w.dtype == DType::kF32 && p.w.strides[0] == k) {
        wf = reinterpret_cast<const float*>(p.w.row_ptr(j0));
      } else {
        tile.resize(size_t(rows * k));
        for (int64_t j = 0; j < rows; ++j) {
          quant::DequantizeRow(p.w.dtype, p.w.row_ptr(j0 + j), tile.data() + j * k, k);
          if (p.w_scale.data) detail::ScaleWeightRow(p.w_scale, j0 + j, tile.data() + j * k, k);
        }
        wf = tile.data();
      }
      float beta = p.accumulate ? 1.0f : 0.0f;
      if (p.bias.data) {
        const float* bias = p.bias.as<float>() + j0;
        for (int64_t r = 0; r < n; ++r) {
          float* o = detail::RowF32(p.out, r) + j0;
          for (int64_t j = 0; j < rows; ++j) o[j] = (p.accumulate ? o[j] : 0.0f) + bias[j];
        }
        beta = 1.0f;
      }
      for (int64_t r = 0; r < n; ++r)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, blasint(rows), blasint(k), 1.0f, wf, blasint(k),
                    detail::RowF32(p.x, r), 1, beta, detail::RowF32(p.out, r) + j0, 1);
    }
  });
}

}  // namespace

void RegisterGemm(Registry& r) {
  openblas_set_num_threads(1);  // parallelism comes from our pool, one sgemm per tile
  r.Register(KernelImpl<MatmulParams>{
      "cpu_blas", Device::kCpu, kPriorityCpuGeneric,
      [](const MatmulParams& p) { return !IsRows4(p.w.dtype); }, &GemmBlas});
}

}  // namespace pg::ops::cpu
