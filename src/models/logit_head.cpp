#include "models/logit_head.h"

#include "core/status.h"
#include "kernels/ops.h"
#include "kernels/ops_fused.h"

namespace pg::models {

void RunLogitHead(const LogitHeadParams& p) {
  const int64_t n = p.residual.dim(0), m = int64_t(p.logit_rows.size());
  TensorView g = p.gathered.Slice0(0, m), gn = p.normed.Slice0(0, m);
  const bool add = p.last.data != nullptr;
  // One op per run of consecutive rows (decode asks for every row: one run).
  for (int64_t i = 0; i < m;) {
    const int64_t r0 = p.logit_rows[size_t(i)];
    int64_t len = 1;
    while (i + len < m && p.logit_rows[size_t(i + len)] == r0 + len) ++len;
    PG_CHECK(r0 >= 0 && r0 + len <= n, "logit rows {}+{} of {}", r0, len, n);
    if (add) {
      ops::Add({.a = p.residual.Slice0(r0, len), .b = p.last.Slice0(r0, len), .out = g.Slice0(i, len)});
    } else if (len == m) {  // one run of the final stream: norm fused into the projection
      ops::FusedMatmul({.x = p.residual.Slice0(r0, len), .norm_weight = p.norm_weight,
                        .eps = p.eps, .w = p.output, .out = p.logits, .normed = gn});
      return;
    } else {
      ops::RmsNorm({.x = p.residual.Slice0(r0, len), .weight = p.norm_weight,
                    .out = gn.Slice0(i, len), .eps = p.eps});
    }
    i += len;
  }
  if (add) ops::RmsNorm({.x = g, .weight = p.norm_weight, .out = gn, .eps = p.eps});
  ops::Matmul({.x = gn, .w = p.output, .out = p.logits});
}

}  // namespace pg::models
