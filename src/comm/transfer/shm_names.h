// Names of libfabric shm endpoints, and the removal of regions that dead processes left.
//
// libfabric 1.17's shm provider backs each endpoint with a 16 MiB region, /dev/shm/<name>,
// by default <pid>:<domain>:<endpoint>. A process that ends without closing its endpoints
// (a crash, _exit, SIGKILL) leaves the region behind, and a later process that is given the
// same pid then fails fi_enable with EBUSY (seen: a rank of the peer-death test could not
// start). So Peregrine names every shm endpoint itself, unique per process and call:
//   pg_<pid namespace inode>_<pid>_<64-bit nonce, hex>_<endpoint index>
// and, before opening endpoints, removes regions of that form whose process no longer exists
// in this pid namespace (the namespace is in the name, so a region of another container that
// shares /dev/shm is never touched; neither is one of this process).
#pragma once

#include <cstdint>
#include <string>

namespace pg::comm {

// A fresh name for endpoint `index` of a provider opened now (< 64 bytes).
std::string UniqueShmEndpointName(uint32_t index);

// Removes entries of `dir` (the directory behind shm_open: /dev/shm on Linux) named as above
// whose pid, in this pid namespace, no longer exists. Returns how many it removed.
int RemoveStaleShmRegions(const std::string& dir = "/dev/shm");

}  // namespace pg::comm
