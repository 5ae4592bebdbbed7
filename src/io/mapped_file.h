// Read-only memory mapping of a whole file (RAII). The bytes live as long as the MappedFile.
// An empty file maps to data() == nullptr, size() == 0 (mmap of length 0 is not allowed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pg::io {

class MappedFile {
 public:
  // Throws pg::Error(kNotFound) if the path does not exist, kIo for any other OS failure
  // (permission, not a regular file, mmap failure). Messages name the path and errno text.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void Release() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pg::io
