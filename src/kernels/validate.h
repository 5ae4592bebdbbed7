// Parameter checks shared by every op's validation (registry.cpp, ref/moe_register.cpp).
// Validation runs on every op call, so the message is formatted only when the check fails.
#pragma once

#include <fmt/format.h>

#include "core/status.h"

// Throws pg::Error(kInvalidArgument, "<op>: <message>") unless `cond` holds; the message
// arguments are fmt-style and evaluated only on failure.
#define PG_OP_NEED(cond, op, ...)                                                        \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::pg::Throw(::pg::ErrorCode::kInvalidArgument, "{}: {}", (op),                     \
                  ::fmt::format(__VA_ARGS__));                                           \
  } while (0)
