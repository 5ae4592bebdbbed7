// Encode time of the ~50K-token agentic prompt, single thread.
// Usage: bench_tokenizer [--iters N] [tokenizer.json|model.gguf ...] (default: the three test families).
// Run from the repo root. Prints cold (fresh thread: empty word cache; median of 5) and warm
// (same thread, cache filled; median of N) times.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {
double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

int main(int argc, char** argv) {
  using pg::tokenizer::Tokenizer;
  std::vector<std::string> paths;
  int iters = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--iters" && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else {
      paths.push_back(argv[i]);
    }
  }
  if (paths.empty())
    paths = {"models/SmolLM2-135M-Instruct.Q4_1.gguf", "tests/data/tokenizer/qwen.tokenizer.json",
             "tests/data/tokenizer/llama3.tokenizer.json"};
  std::ifstream in("tests/data/tokenizer/agentic_prompt.txt", std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string prompt = buf.str();
  for (const std::string& path : paths) {
    std::unique_ptr<Tokenizer> tok;
    const double t_load = NowMs();
    std::unique_ptr<pg::io::GgufFile> gguf;
    if (path.size() > 5 && path.substr(path.size() - 5) == ".gguf") {
      gguf = pg::io::GgufFile::Open(path);
      tok = Tokenizer::FromGguf(*gguf);
    } else {
      tok = Tokenizer::FromHfJson(path);
    }
    const double load_ms = NowMs() - t_load;
    // Cold: a fresh thread has an empty word cache (the cache is per thread).
    size_t n = 0;
    std::vector<double> cold;
    for (int i = 0; i < 5; ++i) {
      std::thread th([&] {
        const double t = NowMs();
        n = tok->Encode(prompt, {.add_bos = false}).size();
        cold.push_back(NowMs() - t);
      });
      th.join();
    }
    std::sort(cold.begin(), cold.end());
    std::vector<double> warm;
    for (int i = 0; i < iters; ++i) {
      const double t = NowMs();
      n = tok->Encode(prompt, {.add_bos = false}).size();
      warm.push_back(NowMs() - t);
    }
    std::sort(warm.begin(), warm.end());
    std::printf("%s: %zu bytes -> %zu tokens | load %.0f ms | encode cold (new thread, empty word cache) median %.2f ms (min %.2f), warm median "
                "%.2f ms (min %.2f) = %.1f M tokens/s\n",
                path.c_str(), prompt.size(), n, load_ms, cold[cold.size() / 2], cold[0],
                warm[warm.size() / 2], warm[0],
                n / warm[warm.size() / 2] / 1000.0);
  }
  return 0;
}
