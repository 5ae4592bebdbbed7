// libfabric shm endpoint names and the removal of regions dead processes left (shm_names.h).
#include "comm/transfer/shm_names.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "comm/transfer/provider.h"

namespace pg::comm {
namespace {

namespace fs = std::filesystem;

// The pid of a child that has exited and been reaped: a pid no process holds right now.
pid_t DeadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// "pg_<ns>_" of this process, taken from a generated name.
std::string OwnPrefix() {
  const std::string n = UniqueShmEndpointName(0);
  return n.substr(0, n.find('_', 3) + 1);
}

void Touch(const fs::path& p) { std::ofstream(p) << "x"; }

TEST(ShmNames, UniquePerCallAndCarryThePid) {
  const std::string a = UniqueShmEndpointName(0), b = UniqueShmEndpointName(0);
  EXPECT_NE(a, b);
  EXPECT_LT(a.size(), 64u);
  const std::string pid_part = OwnPrefix() + std::to_string(::getpid()) + "_";
  EXPECT_EQ(a.compare(0, pid_part.size(), pid_part), 0) << a;
  EXPECT_EQ(UniqueShmEndpointName(3).back(), '3');
}

TEST(ShmNames, RemovesOnlyRegionsOfDeadProcessesOfThisNamespace) {
  const fs::path dir = fs::temp_directory_path() / ("pg_shm_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string prefix = OwnPrefix();
  const pid_t dead = DeadPid();
  const std::string stale = prefix + std::to_string(dead) + "_00000000deadbeef_0";
  const std::string own = prefix + std::to_string(::getpid()) + "_0000000000000001_0";
  const std::string live = prefix + std::to_string(::getppid()) + "_0000000000000002_0";
  const std::string other_ns = "pg_1_" + std::to_string(dead) + "_0000000000000003_0";
  const std::string libfabric_default = std::to_string(dead) + ":0:0";
  const std::string not_a_pid = prefix + "x_0000000000000004_0";
  for (const auto& n : {stale, own, live, other_ns, libfabric_default, not_a_pid}) Touch(dir / n);

  EXPECT_EQ(RemoveStaleShmRegions(dir.string()), 1);
  EXPECT_FALSE(fs::exists(dir / stale));
  for (const auto& n : {own, live, other_ns, libfabric_default, not_a_pid}) {
    EXPECT_TRUE(fs::exists(dir / n)) << n << " was removed";
  }
  EXPECT_EQ(RemoveStaleShmRegions(dir.string()), 0);
  EXPECT_EQ(RemoveStaleShmRegions((dir / "missing").string()), 0);
  fs::remove_all(dir);
}

// The failure this naming fixes: a region that a dead process with this process's pid left
// under libfabric's default name made fi_enable fail with EBUSY.
TEST(ShmNames, ProviderOpensBesideARegionLeftUnderTheDefaultNameOfThisPid) {
  const std::string default_name = std::to_string(::getpid()) + ":0:0";
  const int fd = ::shm_open(default_name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0) << "cannot create /dev/shm/" << default_name;
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  ::close(fd);
  try {
    ProviderConfig c;
    c.provider = "shm";
    auto p = OpenLibfabricProvider(c);
    EXPECT_EQ(p->info().provider, "shm");
    EXPECT_EQ(p->num_endpoints(), 1u);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  ::shm_unlink(default_name.c_str());
}

}  // namespace
}  // namespace pg::comm
