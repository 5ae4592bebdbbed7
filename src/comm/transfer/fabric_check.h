// The one check macro for libfabric calls: a negative return becomes pg::Error(kIo) naming
// the call and fi_strerror. Transient -FI_EAGAIN is never passed through this macro.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "core/status.h"

#define PG_FI_CHECK(call)                                                               \
  do {                                                                                  \
    auto _pg_fi_ret = (call);                                                           \
    if (_pg_fi_ret < 0) [[unlikely]] {                                                  \
      ::pg::Throw(::pg::ErrorCode::kIo, "{} failed: {} ({})", #call,                     \
                  ::fi_strerror(int(-_pg_fi_ret)), int(_pg_fi_ret));                    \
    }                                                                                   \
  } while (0)
