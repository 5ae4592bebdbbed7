// Multi-process tests: 2, 4 and 8 ranks of transfer_rank on loopback (tcp;ofi_rxm, net, shm),
// across network namespaces joined by veth pairs and a bridge (tcp;ofi_rxm), and under
// Open MPI's mpirun. Each rank checks its own data (see transfer_rank.cpp); here we check
// that every rank exits 0 before a deadline, and kill them all if not.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
// PEREGRINE_TRANSFER_RANK_BIN overrides the build-time path (binaries run from elsewhere).
const std::string kRankBin = std::getenv("PEREGRINE_TRANSFER_RANK_BIN")
                                 ? std::getenv("PEREGRINE_TRANSFER_RANK_BIN")
                                 : TRANSFER_RANK_BIN;

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct Proc {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // NAME=value added to ours
};

// Runs every process; returns their exit codes (-signal when killed). Kills all at deadline.
std::vector<int> RunAll(const std::vector<Proc>& procs, std::chrono::seconds deadline) {
  std::vector<pid_t> pids;
  for (const auto& p : procs) {
    pid_t pid = ::fork();
    if (pid == 0) {
      for (const auto& e : p.env) ::putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> args;
      for (const auto& a : p.argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::setenv("PEREGRINE_LOG_LEVEL", "warn", 1);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(pids.size(), -1000);
  size_t left = pids.size();
  const auto end = Clock::now() + deadline;
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (codes[i] != -1000) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        --left;
      }
    }
    if (left > 0 && Clock::now() > end) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (codes[i] == -1000) ::kill(pids[i], SIGKILL);
      }
      ADD_FAILURE() << "ranks still running after " << deadline.count() << " s: killed";
      deadline = std::chrono::seconds(3600);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return codes;
}

std::vector<Proc> LocalRanks(int world, const std::vector<std::string>& args) {
  const std::string store = "PEREGRINE_STORE_ADDR=127.0.0.1:" + std::to_string(FreePort());
  std::vector<Proc> procs;
  for (int r = 0; r < world; ++r) {
    Proc p;
    p.argv.push_back(kRankBin);
    p.argv.insert(p.argv.end(), args.begin(), args.end());
    p.env = {"PEREGRINE_RANK=" + std::to_string(r),
             "PEREGRINE_WORLD_SIZE=" + std::to_string(world), store};
    procs.push_back(p);
  }
  return procs;
}

void ExpectAllZero(const std::vector<int>& codes) {
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

struct A2aCase {
  std::string provider;
  int world;
};

class MultiProcA2a : public ::testing::TestWithParam<A2aCase> {};

// 3 rounds, up to 37 tokens per rank, hidden 200 (fp8 + 2 block scales), spec slots of 4:
// both the speculative and the bulk path carry records.
TEST_P(MultiProcA2a, DispatchCombineMatchPlainSendsAndOracle) {
  auto [provider, world] = GetParam();
  ExpectAllZero(RunAll(LocalRanks(world, {"a2a", provider, "3", "37", "200", "4"}),
                       std::chrono::seconds(60)));
}

INSTANTIATE_TEST_SUITE_P(
    Loopback, MultiProcA2a,
    ::testing::Values(A2aCase{"tcp;ofi_rxm", 2}, A2aCase{"tcp;ofi_rxm", 4},
                      A2aCase{"tcp;ofi_rxm", 8}, A2aCase{"shm", 2}, A2aCase{"shm", 4},
                      A2aCase{"shm", 8}, A2aCase{"net", 4}),
    [](const auto& info) {
      std::string n = info.param.provider;
      for (auto& c : n) c = std::isalnum(c) ? c : '_';
      return n + "_" + std::to_string(info.param.world);
    });

class MultiProcKill : public ::testing::TestWithParam<std::string> {};

// The last rank exits between dispatch and combine of round 2; every other rank must report
// an error within the 3 s timeout (+1.5 s), which transfer_rank turns into exit code 0.
TEST_P(MultiProcKill, PeerDeathGivesErrorsWithinTimeout) {
  const auto start = Clock::now();
  ExpectAllZero(RunAll(LocalRanks(4, {"kill", GetParam(), "37", "200"}), std::chrono::seconds(30)));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
}

INSTANTIATE_TEST_SUITE_P(Loopback, MultiProcKill, ::testing::Values("tcp;ofi_rxm", "shm"),
                         [](const auto& info) {
                           return std::string(info.param == "shm" ? "shm" : "tcp_ofi_rxm");
                         });

// ---- network namespaces --------------------------------------------------------------

int Sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

// World of namespaces ns<i> (10.77.<net>.<i+1>/24) bridged in a hub namespace. Created and
// torn down here; any failure to create is a test failure, never a skip.
class Namespaces {
 public:
  Namespaces(int world, int net) : prefix_("pgx" + std::to_string(::getpid() % 100000) + "_") {
    Must("ip netns add " + Ns("hub"));
    Must("ip -n " + Ns("hub") + " link add br0 type bridge");
    Must("ip -n " + Ns("hub") + " link set br0 up");
    for (int i = 0; i < world; ++i) {
      const std::string ns = Ns(std::to_string(i)), vp = "vp" + std::to_string(i);
      Must("ip netns add " + ns);
      Must("ip -n " + ns + " link add eth0 type veth peer name " + vp + " netns " + Ns("hub"));
      Must("ip -n " + Ns("hub") + " link set " + vp + " master br0 up");
      Must("ip -n " + ns + " addr add " + Ip(net, i) + "/24 dev eth0");
      Must("ip -n " + ns + " link set eth0 up");
      Must("ip -n " + ns + " link set lo up");
      names_.push_back(ns);
    }
  }
  ~Namespaces() {
    for (const auto& ns : names_) Sh("ip netns del " + ns);
    Sh("ip netns del " + Ns("hub"));
  }
  std::string Ns(const std::string& s) const { return prefix_ + s; }
  static std::string Ip(int net, int i) {
    return "10.77." + std::to_string(net) + "." + std::to_string(i + 1);
  }
  bool ok() const { return ok_; }

 private:
  void Must(const std::string& cmd) {
    if (Sh(cmd) != 0) {
      ok_ = false;
      ADD_FAILURE() << "cannot set up network namespaces (needs root and iproute2): " << cmd;
    }
  }
  std::string prefix_;
  std::vector<std::string> names_;
  bool ok_ = true;
};

class NetnsA2a : public ::testing::TestWithParam<int> {};

TEST_P(NetnsA2a, DispatchCombineAcrossNamespaces) {
  const int world = GetParam();
  Namespaces ns(world, world);
  ASSERT_TRUE(ns.ok());
  const std::string store =
      "PEREGRINE_STORE_ADDR=" + Namespaces::Ip(world, 0) + ":" + std::to_string(FreePort());
  std::vector<Proc> procs;
  for (int r = 0; r < world; ++r) {
    Proc p;
    p.argv = {"ip", "netns", "exec", ns.Ns(std::to_string(r)), kRankBin, "a2a", "tcp;ofi_rxm",
              "3", "37", "200", "4"};
    p.env = {"PEREGRINE_RANK=" + std::to_string(r),
             "PEREGRINE_WORLD_SIZE=" + std::to_string(world), store,
             "PEREGRINE_FABRIC_HOST=" + Namespaces::Ip(world, r)};
    procs.push_back(p);
  }
  ExpectAllZero(RunAll(procs, std::chrono::seconds(60)));
}

INSTANTIATE_TEST_SUITE_P(Veth, NetnsA2a, ::testing::Values(2, 4, 8));

// ---- mpirun --------------------------------------------------------------------------

TEST(MpirunA2a, FourRanksBootstrapFromOmpiEnvironment) {
  ASSERT_EQ(Sh("command -v mpirun"), 0) << "mpirun (openmpi-bin) is not installed";
  const std::string store = "PEREGRINE_STORE_ADDR=127.0.0.1:" + std::to_string(FreePort());
  Proc p;
  p.argv = {"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4", "-x", store,
            kRankBin, "a2a", "tcp;ofi_rxm", "2", "37", "200", "4"};
  p.env = {store, "OMPI_MCA_plm_rsh_agent=false"};
  ExpectAllZero(RunAll({p}, std::chrono::seconds(60)));
}

}  // namespace
