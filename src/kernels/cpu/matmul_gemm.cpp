// Prefill-time Matmul (many activation rows): OpenBLAS sgemm on f32 tiles of the weight,
// dequantized on the fly. Tiles of kTileRows output features are spread over the thread
// pool; each runs a single-threaded sgemm, so OpenBLAS's own threads are set to 1.
//
//   out[:, j0:j1] (= or +=) x[n, k] · dequant(w[j0:j1, k])^T (+ bias[j0:j1])
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
  const int64_t ldx = n > 1 ? p.x.strides[0] : k;
  const int64_t ldo = n > 1 ? p.out.strides[0] : m;
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
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(n), blasint(rows), blasint(k),
                  1.0f, p.x.as<float>(), blasint(ldx), wf, blasint(k), beta,
                  p.out.as<float>() + j0, blasint(ldo));
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
