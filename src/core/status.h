// Two tiers of errors (DESIGN.md example 6):
//  * pg::Error — anything a user, a request or a file can cause (bad flag, malformed
//    checkpoint, prompt too long, out of memory for one request). Thrown, caught at the
//    boundary (CLI main, server request handler), turned into a message / HTTP status.
//  * PG_CHECK — a broken internal invariant. Prints file:line and aborts.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace pg {

enum class ErrorCode {
  kInvalidArgument,  // bad flag, bad request field, wrong shape passed by a caller
  kNotFound,         // missing file, unknown model, unknown tensor name
  kMalformed,        // a file (GGUF, safetensors, JSON) that breaks its format
  kUnsupported,      // valid input we do not handle (unknown architecture, dtype)
  kOutOfRange,       // prompt longer than the context, index out of bounds
  kResourceExhausted,// out of KV pages / memory for this request, queue full
  kIo,               // OS-level read/write/mmap failure
  kCancelled,        // the caller went away
  kInternal,         // should not happen; reported rather than aborting
};

std::string_view ErrorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// Throws pg::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void Throw(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(code, fmt::format(f, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void CheckFailed(const char* file, int line, const char* expr, const std::string& msg);
}  // namespace detail

}  // namespace pg

// Fatal invariant check. Message arguments are fmt-style and only evaluated on failure.
#define PG_CHECK(cond, ...)                                                             \
  do {                                                                                  \
    if (!(cond)) [[unlikely]] {                                                         \
      ::pg::detail::CheckFailed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
    }                                                                                   \
  } while (0)

// Throws pg::Error(code, ...) unless cond holds. For user/file-caused conditions.
#define PG_ENSURE(cond, code, ...)                          \
  do {                                                      \
    if (!(cond)) [[unlikely]] {                             \
      ::pg::Throw(::pg::ErrorCode::code, __VA_ARGS__);      \
    }                                                       \
  } while (0)
