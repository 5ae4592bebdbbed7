#include "comm/transfer/shm_names.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <random>

#include <fmt/format.h>

#include "core/log.h"

namespace pg::comm {
namespace {

// The inode of this process's pid namespace ("pid:[4026531836]" -> 4026531836), or 0 when
// /proc does not say.
uint64_t PidNamespace() {
  char buf[64] = {0};
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  if (n <= 0) return 0;
  const char* p = buf;
  while (*p != '\0' && (*p < '0' || *p > '9')) ++p;
  return std::strtoull(p, nullptr, 10);
}

// "pg_<pid namespace>_" (a process's namespace is fixed; read once).
const std::string& Prefix() {
  static const std::string prefix = fmt::format("pg_{}_", PidNamespace());
  return prefix;
}

}  // namespace

std::string UniqueShmEndpointName(uint32_t index) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{}_{:016x}_{}", Prefix(), ::getpid(), rng(), index);
}

int RemoveStaleShmRegions(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  const std::string& prefix = Prefix();
  const pid_t self = ::getpid();
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (end == nullptr || *end != '_' || pid <= 0 || pid == self) continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to ask
    if (::unlinkat(::dirfd(d), name.c_str(), 0) == 0) {
      ++removed;
      PG_LOG_INFO("libfabric shm: removed {}/{}, left by process {} which no longer exists",
                  dir, name, pid);
    }
  }
  ::closedir(d);
  return removed;
}

}  // namespace pg::comm
