// Shared helpers for the io tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"

namespace pg::io::testing {

inline std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline void WriteAll(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// A fresh directory under the system temp dir, removed at destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("pg_io_test_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs f, which must throw pg::Error with `code`; returns the message (empty on failure).
inline std::string ExpectError(const std::function<void()>& f, ErrorCode code) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(ErrorCodeName(e.code()), ErrorCodeName(code)) << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-pg exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

}  // namespace pg::io::testing
