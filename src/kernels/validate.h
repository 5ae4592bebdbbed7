// Parameter checks shared by every op's validation (registry.cpp, ref/moe_register.cpp,
// fused_attention.cpp).
// Validation runs on every op call, so the message is formatted only when the check fails.
#pragma once

#include <fmt/format.h>

#include <string_view>

#include "core/status.h"
#include "core/tensor.h"

// Throws pg::Error(kInvalidArgument, "<op>: <message>") unless `cond` holds; the message
// arguments are fmt-style and evaluated only on failure.
#define PG_OP_NEED(cond, op, ...)                                                        \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::pg::Throw(::pg::ErrorCode::kInvalidArgument, "{}: {}", (op),                     \
                  ::fmt::format(__VA_ARGS__));                                           \
  } while (0)

namespace pg::ops {
// An op's L2 hint (a TensorView whose bytes the caller reads next; no effect on results): empty,
// or contiguous on the op's device.
inline void NeedL2Hint(std::string_view op, const TensorView& hint, Device op_device) {
  if (hint.data == nullptr) return;
  PG_OP_NEED(hint.device == op_device && hint.is_contiguous(), op,
             "l2_after must be a contiguous tensor on the op's device");
}
}  // namespace pg::ops
