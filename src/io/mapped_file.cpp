#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/status.h"

namespace pg::io {
namespace {

// Closes the descriptor on every path out of the constructor.
struct Fd {
  int fd = -1;
  ~Fd() { if (fd >= 0) ::close(fd); }
};

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  Fd fd;
  fd.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd.fd < 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      Throw(ErrorCode::kNotFound, "{}: no such file", path);
    Throw(ErrorCode::kIo, "{}: cannot open: {}", path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0)
    Throw(ErrorCode::kIo, "{}: cannot stat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) Throw(ErrorCode::kIo, "{}: not a regular file", path);
  if (st.st_size == 0) return;  // empty: nothing to map
  size_t size = size_t(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (p == MAP_FAILED)
    Throw(ErrorCode::kIo, "{}: mmap of {} bytes failed: {}", path, size, std::strerror(errno));
  data_ = static_cast<const uint8_t*>(p);
  size_ = size;
}

MappedFile::~MappedFile() { Release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::Release() noexcept {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace pg::io
