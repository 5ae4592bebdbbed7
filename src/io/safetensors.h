// safetensors reader: a single file (mmapped) and sharded checkpoints through
// model.safetensors.index.json.
//
// File layout: u64 little-endian header length N | N bytes of JSON header | data section.
// Header: {"__metadata__": {str: str}?, "<tensor>": {"dtype": "BF16", "shape": [..],
// "data_offsets": [begin, end]}, ...}; offsets are relative to the data section.
//
// Validated on open (kMalformed naming the file and what is wrong): header length within the
// file, header is strict JSON (UTF-8, no duplicate keys), every entry has a known dtype
// (kUnsupported for valid names we do not handle), a non-negative shape, begin <= end inside
// the data section, end - begin == numel * dtype size, and no two tensors overlap.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace pg::io {

class MappedFile;

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};  // row-major, as stored
  uint64_t begin = 0;                     // byte range inside the data section
  uint64_t end = 0;
  const uint8_t* data = nullptr;          // into the mapping (or the caller's buffer)

  uint64_t nbytes() const { return end - begin; }
  TensorView view() const;  // contiguous CPU view of the mapped bytes (read-only in practice)
};

class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> Open(const std::string& path);
  // Parses an in-memory image (fuzzer, tests). `data` must outlive the result.
  static std::unique_ptr<SafetensorsFile> FromMemory(const uint8_t* data, size_t size,
                                                     std::string name = "<memory>");
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Sorted by data offset (file order).
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const SafetensorsTensorInfo* FindTensor(std::string_view name) const;  // nullptr if absent

 private:
  SafetensorsFile() = default;
  void Parse(const uint8_t* data, size_t size);

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

// A checkpoint of one or more shards. Tensor lookups go through the index's weight_map.
class SafetensorsModel {
 public:
  // `path` is a directory (uses model.safetensors.index.json if present, else
  // model.safetensors), an index .json file, or a single .safetensors file.
  // Every tensor named by the weight_map must exist in the shard it names (kMalformed);
  // shard names must be plain file names inside the index's directory.
  static std::unique_ptr<SafetensorsModel> Open(const std::string& path);

  size_t num_shards() const { return shards_.size(); }
  const SafetensorsFile& shard(size_t i) const { return *shards_[i]; }
  // The index's "metadata" object as strings (e.g. total_size), empty for a single file.
  const std::map<std::string, std::string>& index_metadata() const { return index_metadata_; }
  // Every tensor name, sorted.
  std::vector<std::string> TensorNames() const;
  const SafetensorsTensorInfo* FindTensor(std::string_view name) const;  // nullptr if absent
  // Throws kNotFound naming the checkpoint when absent.
  const SafetensorsTensorInfo& GetTensor(std::string_view name) const;

 private:
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, std::string> index_metadata_;
  std::map<std::string, const SafetensorsTensorInfo*, std::less<>> tensors_;
};

}  // namespace pg::io
