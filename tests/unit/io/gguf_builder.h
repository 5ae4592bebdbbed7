// Test-side GGUF writer: builds a GGUF image in memory, field by field, so tests can write
// valid files with chosen contents and then corrupt exactly one field. Independent of
// src/io/gguf.cpp (it follows the GGUF spec, not the reader).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace pg::io::testing {

class ByteWriter {
 public:
  std::vector<uint8_t> bytes;
  size_t size() const { return bytes.size(); }
  template <typename T>
  void Put(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    bytes.insert(bytes.end(), b, b + sizeof(T));
  }
  void PutStr(const std::string& s) {
    Put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void PadTo(uint64_t alignment) {
    while (bytes.size() % alignment) bytes.push_back(0);
  }
};

struct BuilderTensor {
  std::string name;
  std::vector<uint64_t> ne;  // GGUF order: ne[0] innermost
  uint32_t ggml_type = 0;    // 0 = F32
  std::vector<uint8_t> data;
};

// Positions of fields inside the built image, for targeted corruption.
struct BuiltGguf {
  std::vector<uint8_t> bytes;
  size_t tensor_count_pos = 0, kv_count_pos = 0;
  std::vector<size_t> kv_pos;                // start of each KV (its key length)
  std::vector<size_t> tensor_info_pos;       // start of each tensor info (its name length)
  std::vector<size_t> tensor_type_pos;       // each tensor's ggml type field
  std::vector<size_t> tensor_offset_pos;     // each tensor's offset field
  size_t data_start = 0;
};

class GgufBuilder {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;  // used for layout; add "general.alignment" yourself if not 32

  // Raw KV: the caller encodes the value (after the type id) with a ByteWriter.
  void AddRaw(const std::string& key, uint32_t type, const std::vector<uint8_t>& value) {
    kvs_.push_back({key, type, value});
  }
  void AddU32(const std::string& key, uint32_t v) { AddRaw(key, 4, Enc(v)); }
  void AddI32(const std::string& key, int32_t v) { AddRaw(key, 5, Enc(v)); }
  void AddF32(const std::string& key, float v) { AddRaw(key, 6, Enc(v)); }
  void AddU64(const std::string& key, uint64_t v) { AddRaw(key, 10, Enc(v)); }
  void AddBool(const std::string& key, bool v) { AddRaw(key, 7, Enc(uint8_t(v))); }
  void AddString(const std::string& key, const std::string& v) {
    ByteWriter w;
    w.PutStr(v);
    AddRaw(key, 8, w.bytes);
  }
  void AddStringArray(const std::string& key, const std::vector<std::string>& v) {
    ByteWriter w;
    w.Put<uint32_t>(8);
    w.Put<uint64_t>(v.size());
    for (const auto& s : v) w.PutStr(s);
    AddRaw(key, 9, w.bytes);
  }
  void AddTensor(BuilderTensor t) { tensors_.push_back(std::move(t)); }

  BuiltGguf Build() const {
    BuiltGguf out;
    ByteWriter w;
    w.Put<uint32_t>(0x46554747);
    w.Put<uint32_t>(version);
    out.tensor_count_pos = w.size();
    w.Put<uint64_t>(tensors_.size());
    out.kv_count_pos = w.size();
    w.Put<uint64_t>(kvs_.size());
    for (const auto& kv : kvs_) {
      out.kv_pos.push_back(w.size());
      w.PutStr(kv.key);
      w.Put<uint32_t>(kv.type);
      w.bytes.insert(w.bytes.end(), kv.value.begin(), kv.value.end());
    }
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors_) {
      out.tensor_info_pos.push_back(w.size());
      w.PutStr(t.name);
      w.Put<uint32_t>(uint32_t(t.ne.size()));
      for (uint64_t n : t.ne) w.Put<uint64_t>(n);
      out.tensor_type_pos.push_back(w.size());
      w.Put<uint32_t>(t.ggml_type);
      out.tensor_offset_pos.push_back(w.size());
      w.Put<uint64_t>(offset);
      offsets.push_back(offset);
      offset += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    w.PadTo(alignment);
    out.data_start = w.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      w.bytes.insert(w.bytes.end(), tensors_[i].data.begin(), tensors_[i].data.end());
      if (i + 1 < tensors_.size()) w.PadTo(alignment);
    }
    out.bytes = std::move(w.bytes);
    return out;
  }

  template <typename T>
  static std::vector<uint8_t> Enc(T v) {
    ByteWriter w;
    w.Put(v);
    return w.bytes;
  }

 private:
  struct KV {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> value;
  };
  std::vector<KV> kvs_;
  std::vector<BuilderTensor> tensors_;
};

template <typename T>
void Poke(std::vector<uint8_t>& bytes, size_t pos, T v) {
  std::memcpy(bytes.data() + pos, &v, sizeof(T));
}

}  // namespace pg::io::testing
