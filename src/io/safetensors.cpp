#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include <fmt/ranges.h>

#include "core/status.h"
#include "io/json_util.h"
#include "io/mapped_file.h"

namespace pg::io {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// safetensors' own limit on the header; anything larger is rejected before parsing.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// dtype names that safetensors defines but we do not load.
bool IsKnownUnsupportedDtype(std::string_view n) {
  static constexpr std::string_view kNames[] = {"U16", "U32", "U64", "F8_E8M0", "F6_E2M3",
                                                "F6_E3M2", "F4", "C64", "F8_E4M3FNUZ",
                                                "F8_E5M2FNUZ"};
  return std::find(std::begin(kNames), std::end(kNames), n) != std::end(kNames);
}

// A JSON value that must be a non-negative integer fitting in uint64.
bool AsUnsigned(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    *out = uint64_t(j.get<int64_t>());
    return true;
  }
  return false;
}

}  // namespace

TensorView SafetensorsTensorInfo::view() const {
  return TensorView::Contiguous(const_cast<uint8_t*>(data), dtype, shape.data(), ndim);
}

SafetensorsFile::~SafetensorsFile() = default;

std::unique_ptr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->mapping_ = std::make_unique<MappedFile>(path);
  f->Parse(f->mapping_->data(), f->mapping_->size());
  return f;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::FromMemory(const uint8_t* data, size_t size,
                                                             std::string name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = std::move(name);
  f->Parse(data, size);
  return f;
}

void SafetensorsFile::Parse(const uint8_t* data, size_t size) {
  const std::string& name = path_;
  if (size < 8)
    Throw(ErrorCode::kMalformed, "{}: truncated file: {} bytes, the header length alone needs 8",
          name, size);
  uint64_t header_len;
  std::memcpy(&header_len, data, 8);
  if (header_len > kMaxHeaderBytes)
    Throw(ErrorCode::kMalformed, "{}: header length {} exceeds the {}-byte limit at byte 0", name,
          header_len, kMaxHeaderBytes);
  if (header_len > size - 8)
    Throw(ErrorCode::kMalformed,
          "{}: header length {} runs past the end of the {}-byte file at byte 0", name,
          header_len, size);
  std::string_view text(reinterpret_cast<const char*>(data + 8), size_t(header_len));
  json header = ParseJsonStrict(text, name + " header");
  if (!header.is_object())
    Throw(ErrorCode::kMalformed, "{}: header is a JSON {}, expected an object", name,
          JsonTypeName(header));

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  for (const auto& [key, entry] : header.items()) {
    if (key == "__metadata__") {
      if (!entry.is_object())
        Throw(ErrorCode::kMalformed, "{}: __metadata__ is a JSON {}, expected an object", name,
              JsonTypeName(entry));
      for (const auto& [mk, mv] : entry.items()) {
        if (!mv.is_string())
          Throw(ErrorCode::kMalformed, "{}: __metadata__['{}'] is a JSON {}, expected a string",
                name, mk, JsonTypeName(mv));
        metadata_.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    std::string what = fmt::format("{}: tensor '{}'", name, key);
    if (!entry.is_object())
      Throw(ErrorCode::kMalformed, "{} is a JSON {}, expected an object", what,
            JsonTypeName(entry));
    auto dt_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto off_it = entry.find("data_offsets");
    if (dt_it == entry.end() || shape_it == entry.end() || off_it == entry.end())
      Throw(ErrorCode::kMalformed, "{} lacks one of dtype / shape / data_offsets", what);
    if (!dt_it->is_string())
      Throw(ErrorCode::kMalformed, "{}: dtype is a JSON {}", what, JsonTypeName(*dt_it));

    SafetensorsTensorInfo t;
    t.name = key;
    const std::string dtype_name = dt_it->get<std::string>();
    std::optional<DType> dt = FromSafetensorsName(dtype_name);
    if (!dt) {
      if (IsKnownUnsupportedDtype(dtype_name))
        Throw(ErrorCode::kUnsupported, "{}: dtype {} is not supported", what, dtype_name);
      Throw(ErrorCode::kMalformed, "{}: unknown dtype '{}'", what, dtype_name);
    }
    t.dtype = *dt;

    if (!shape_it->is_array())
      Throw(ErrorCode::kMalformed, "{}: shape is a JSON {}, expected an array", what,
            JsonTypeName(*shape_it));
    if (shape_it->size() > size_t(kMaxDims))
      Throw(ErrorCode::kUnsupported, "{} has {} dims (max {})", what, shape_it->size(), kMaxDims);
    t.ndim = int(shape_it->size());
    int64_t numel = 1;
    for (int d = 0; d < t.ndim; ++d) {
      uint64_t n;
      if (!AsUnsigned((*shape_it)[size_t(d)], &n) ||
          n > uint64_t(std::numeric_limits<int64_t>::max()))
        Throw(ErrorCode::kMalformed, "{}: shape[{}] is not a non-negative integer", what, d);
      if (n != 0 && numel > std::numeric_limits<int64_t>::max() / int64_t(n))
        Throw(ErrorCode::kMalformed, "{}: element count overflows", what);
      t.shape[size_t(d)] = int64_t(n);
      numel *= int64_t(n);
    }

    if (!off_it->is_array() || off_it->size() != 2 || !AsUnsigned((*off_it)[0], &t.begin) ||
        !AsUnsigned((*off_it)[1], &t.end))
      Throw(ErrorCode::kMalformed, "{}: data_offsets must be [begin, end] non-negative integers",
            what);
    if (t.begin > t.end || t.end > data_size)
      Throw(ErrorCode::kMalformed,
            "{}: data_offsets [{}, {}) lie outside the {}-byte data section (starts at byte {})",
            what, t.begin, t.end, data_size, data_start);
    std::optional<int64_t> bytes = BytesFor(t.dtype, numel);
    if (!bytes || uint64_t(*bytes) != t.end - t.begin)
      Throw(ErrorCode::kMalformed,
            "{}: data_offsets span {} bytes but shape [{}] of {} needs {}", what, t.end - t.begin,
            fmt::join(t.shape.begin(), t.shape.begin() + t.ndim, ", "), dtype_name,
            bytes ? std::to_string(*bytes) : std::string("an overflowing count"));
    t.data = data + data_start + t.begin;
    tensors_.push_back(std::move(t));
  }

  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t k = 1; k < tensors_.size(); ++k) {
    const auto& prev = tensors_[k - 1];
    const auto& cur = tensors_[k];
    if (prev.nbytes() > 0 && cur.nbytes() > 0 && prev.end > cur.begin)
      Throw(ErrorCode::kMalformed, "{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", name,
            prev.name, prev.begin, prev.end, cur.name, cur.begin, cur.end);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const SafetensorsTensorInfo* SafetensorsFile::FindTensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---- SafetensorsModel ----

std::unique_ptr<SafetensorsModel> SafetensorsModel::Open(const std::string& path) {
  auto m = std::make_unique<SafetensorsModel>();
  m->path_ = path;
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "model.safetensors.index.json", ec))
      p /= "model.safetensors.index.json";
    else if (fs::exists(p / "model.safetensors", ec))
      p /= "model.safetensors";
    else
      Throw(ErrorCode::kNotFound,
            "{}: no model.safetensors.index.json or model.safetensors in this directory", path);
  }

  if (p.extension() != ".json") {
    m->shards_.push_back(SafetensorsFile::Open(p.string()));
    for (const auto& t : m->shards_[0]->tensors()) m->tensors_.emplace(t.name, &t);
    return m;
  }

  const std::string index_path = p.string();
  json index = LoadJsonFile(index_path);
  if (!index.is_object())
    Throw(ErrorCode::kMalformed, "{}: expected a JSON object", index_path);
  if (auto md = index.find("metadata"); md != index.end() && md->is_object())
    for (const auto& [k, v] : md->items())
      m->index_metadata_.emplace(k, v.is_string() ? v.get<std::string>() : v.dump());
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object())
    Throw(ErrorCode::kMalformed, "{}: missing \"weight_map\" object", index_path);

  const fs::path dir = p.parent_path();
  std::map<std::string, size_t> shard_of_file;  // shard file name -> index in shards_
  for (const auto& [tensor, file] : wm->items()) {
    if (!file.is_string())
      Throw(ErrorCode::kMalformed, "{}: weight_map['{}'] is a JSON {}, expected a file name",
            index_path, tensor, JsonTypeName(file));
    const std::string fname = file.get<std::string>();
    if (fname.empty() || fname.find('/') != std::string::npos || fname == "." || fname == "..")
      Throw(ErrorCode::kMalformed, "{}: weight_map['{}'] names '{}', not a plain file name",
            index_path, tensor, fname);
    auto [it, inserted] = shard_of_file.emplace(fname, m->shards_.size());
    if (inserted) m->shards_.push_back(SafetensorsFile::Open((dir / fname).string()));
    const SafetensorsTensorInfo* t = m->shards_[it->second]->FindTensor(tensor);
    if (!t)
      Throw(ErrorCode::kMalformed, "{}: weight_map puts '{}' in {}, which does not contain it",
            index_path, tensor, fname);
    m->tensors_.emplace(tensor, t);
  }
  return m;
}

std::vector<std::string> SafetensorsModel::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [n, t] : tensors_) names.push_back(n);
  return names;
}

const SafetensorsTensorInfo* SafetensorsModel::FindTensor(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

const SafetensorsTensorInfo& SafetensorsModel::GetTensor(std::string_view name) const {
  const SafetensorsTensorInfo* t = FindTensor(name);
  if (!t) Throw(ErrorCode::kNotFound, "{}: no tensor named '{}'", path_, name);
  return *t;
}

}  // namespace pg::io
