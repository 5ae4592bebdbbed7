#include "models/logit_head.h"

#include "core/status.h"
#include "kernels/ops.h"

namespace pg::models {

void RunLogitHead(const LogitHeadParams& p) {
  const int64_t n = p.residual.dim(0), m = int64_t(p.logit_rows.size());
  TensorView g = p.gathered.Slice0(0, m), gn = p.normed.Slice0(0, m);
  // One Add per run of consecutive rows (decode asks for every row: one op).
  for (int64_t i = 0; i < m;) {
    const int64_t r0 = p.logit_rows[size_t(i)];
    int64_t len = 1;
    while (i + len < m && p.logit_rows[size_t(i + len)] == r0 + len) ++len;
    PG_CHECK(r0 >= 0 && r0 + len <= n, "logit rows {}+{} of {}", r0, len, n);
    ops::Add({.a = p.residual.Slice0(r0, len), .b = p.last.Slice0(r0, len), .out = g.Slice0(i, len)});
    i += len;
  }
  ops::RmsNorm({.x = g, .weight = p.norm_weight, .out = gn, .eps = p.eps});
  ops::Matmul({.x = gn, .w = p.output, .out = p.logits});
}

}  // namespace pg::models
