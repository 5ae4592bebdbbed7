// Environment knobs (A/B switches and diagnostics of the kernels and models). Callers read a
// knob once per process (a function-local static), never per step.
#pragma once

#include <cstdlib>

namespace pg {

// The integer value of `name` (atoi), or `fallback` when it is unset or empty.
inline int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? std::atoi(v) : fallback;
}

// A switch: unset or empty -> `fallback`; "0" -> false; any other value -> true.
inline bool EnvFlag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || v[0] == '\0') return fallback;
  return !(v[0] == '0' && v[1] == '\0');
}

}  // namespace pg
