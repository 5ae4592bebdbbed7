// GGUF v2/v3 reader. The file is mmapped read-only; tensor data pointers point into the
// mapping and live as long as the GgufFile. Every size, count and offset read from the file
// is checked against the file's length before use: a malformed file throws
// pg::Error(kMalformed, "<path>: <what> at byte <offset>") and never reads out of bounds.
#pragma once

#include <cstdint>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace pg::io {

class MappedFile;  // io/mapped_file.h

// GGUF metadata value types (gguf_type ids 0..12).
enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

struct GgufValue;
using GgufArray = std::vector<GgufValue>;
struct GgufValue {
  GgufType type = GgufType::kU8;
  GgufType array_type = GgufType::kU8;  // element type when type == kArray
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> v;

  // Typed access; throws pg::Error(kMalformed) on a type mismatch (integers convert
  // between widths when the value fits).
  int64_t AsInt() const;
  double AsFloat() const;
  bool AsBool() const;
  const std::string& AsString() const;
  const GgufArray& AsArray() const;
};

struct GgufTensorInfo {
  std::string name;
  DType dtype;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};  // ROW-MAJOR (reversed from GGUF's ne[]: shape[ndim-1] = ne[0])
  uint64_t offset = 0;                    // from the start of the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;          // into the mapping

  TensorView view() const;                // CPU view of the mapped bytes (read-only in practice)
};

class GgufFile {
 public:
  // Opens and validates the whole header and tensor table. Throws pg::Error on failure.
  static std::unique_ptr<GgufFile> Open(const std::string& path);
  // Parses an in-memory image (used by the fuzzer and tests). `data` must outlive the result.
  static std::unique_ptr<GgufFile> FromMemory(const uint8_t* data, size_t size,
                                              std::string name = "<memory>");
  ~GgufFile();

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }

  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;  // nullptr if absent
  // Convenience getters: throw kNotFound when absent (the ...Or forms return the default).
  int64_t GetInt(std::string_view key) const;
  int64_t GetIntOr(std::string_view key, int64_t def) const;
  double GetFloatOr(std::string_view key, double def) const;
  std::string GetStringOr(std::string_view key, std::string def) const;
  std::string GetString(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;  // nullptr if absent

 private:
  GgufFile() = default;
  void Parse(const uint8_t* data, size_t size);

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace pg::io
