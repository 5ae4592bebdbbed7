#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/status.h"
#include "io/mapped_file.h"
#include "io/utf8.h"

namespace pg::io {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr int kMaxGgufDims = 4;          // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are rejected
constexpr uint64_t kMaxAlignment = uint64_t(1) << 30;

std::string_view TypeName(GgufType t) {
  switch (t) {
    case GgufType::kU8: return "u8";
    case GgufType::kI8: return "i8";
    case GgufType::kU16: return "u16";
    case GgufType::kI16: return "i16";
    case GgufType::kU32: return "u32";
    case GgufType::kI32: return "i32";
    case GgufType::kF32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "u64";
    case GgufType::kI64: return "i64";
    case GgufType::kF64: return "f64";
  }
  return "?";
}

// Bytes a scalar value of type t occupies on disk; 0 for string/array (variable length).
size_t FixedSize(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    case GgufType::kString: case GgufType::kArray: return 0;
  }
  return 0;
}

// Smallest number of bytes one element of type t can occupy (bounds array counts before
// any allocation: count * MinSize must fit in what is left of the file).
size_t MinSize(GgufType t) {
  if (t == GgufType::kString) return 8;   // u64 length, empty string
  if (t == GgufType::kArray) return 12;   // u32 element type + u64 count, empty array
  return FixedSize(t);
}

// ggml type ids that existed once and were removed (Q4_2, Q4_3, Q4_0_4_4, Q4_0_4_8,
// Q4_0_8_8, IQ4_NL_4_4/4_8/8_8): a valid but unsupported file, not a corrupt one.
bool IsRetiredGgmlType(uint32_t id) {
  return id == 4 || id == 5 || (id >= 31 && id <= 33) || (id >= 36 && id <= 38);
}

// Bounds-checked little-endian cursor over the file image. Every read checks the remaining
// length first; failures throw pg::Error naming the file and the byte offset.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  [[noreturn]] void Fail(ErrorCode code, std::string_view what, size_t at) const {
    Throw(code, "{}: {} at byte {}", name_, what, at);
  }

  void Need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      Fail(ErrorCode::kMalformed,
           fmt::format("truncated file: {} needs {} bytes but only {} remain", what, n,
                       remaining()),
           pos_);
  }

  template <typename T>
  T Read(std::string_view what) {
    Need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // A GGUF string: u64 length + bytes (not NUL-terminated), validated as UTF-8.
  std::string ReadString(std::string_view what) {
    uint64_t len = Read<uint64_t>(what);
    Need(len, what);
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), size_t(len));
    size_t bad = FindInvalidUtf8(s);
    if (bad != std::string_view::npos)
      Fail(ErrorCode::kMalformed, fmt::format("{} is not valid UTF-8", what), pos_ + bad);
    pos_ += size_t(len);
    return std::string(s);
  }

  // A count that is followed by `count` items of at least `min_item_bytes` each: rejected
  // before any allocation when the rest of the file cannot hold them.
  uint64_t ReadCount(std::string_view what, size_t min_item_bytes) {
    size_t at = pos_;
    uint64_t n = Read<uint64_t>(what);
    if (min_item_bytes > 0 && n > remaining() / min_item_bytes)
      Fail(ErrorCode::kMalformed,
           fmt::format("{} {} is impossible: the {} bytes left hold at most {}", what, n,
                       remaining(), remaining() / min_item_bytes),
           at);
    return n;
  }

  GgufType ReadType(std::string_view what) {
    size_t at = pos_;
    uint32_t t = Read<uint32_t>(what);
    if (t > uint32_t(GgufType::kF64))
      Fail(ErrorCode::kMalformed, fmt::format("{}: unknown GGUF value type {}", what, t), at);
    return GgufType(t);
  }

  GgufValue ReadValue(GgufType type, std::string_view what, int depth) {
    GgufValue out;
    out.type = type;
    switch (type) {
      case GgufType::kU8: out.v = uint64_t(Read<uint8_t>(what)); break;
      case GgufType::kU16: out.v = uint64_t(Read<uint16_t>(what)); break;
      case GgufType::kU32: out.v = uint64_t(Read<uint32_t>(what)); break;
      case GgufType::kU64: out.v = Read<uint64_t>(what); break;
      case GgufType::kI8: out.v = int64_t(Read<int8_t>(what)); break;
      case GgufType::kI16: out.v = int64_t(Read<int16_t>(what)); break;
      case GgufType::kI32: out.v = int64_t(Read<int32_t>(what)); break;
      case GgufType::kI64: out.v = Read<int64_t>(what); break;
      case GgufType::kF32: out.v = double(Read<float>(what)); break;
      case GgufType::kF64: out.v = Read<double>(what); break;
      case GgufType::kBool: {
        size_t at = pos_;
        uint8_t b = Read<uint8_t>(what);
        if (b > 1) Fail(ErrorCode::kMalformed, fmt::format("{}: bool byte {}", what, b), at);
        out.v = b != 0;
        break;
      }
      case GgufType::kString: out.v = ReadString(what); break;
      case GgufType::kArray: {
        if (depth >= kMaxArrayDepth)
          Fail(ErrorCode::kMalformed,
               fmt::format("{}: arrays nested deeper than {}", what, kMaxArrayDepth), pos_);
        out.array_type = ReadType(what);
        uint64_t n = ReadCount(fmt::format("{}: array length", what), MinSize(out.array_type));
        GgufArray arr;
        arr.reserve(size_t(n));  // bounded by the file size (ReadCount)
        for (uint64_t i = 0; i < n; ++i) arr.push_back(ReadValue(out.array_type, what, depth + 1));
        out.v = std::move(arr);
        break;
      }
    }
    return out;
  }

  void Seek(size_t pos) { pos_ = pos; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& name_;
};

[[noreturn]] void TypeMismatch(const GgufValue& v, std::string_view wanted) {
  Throw(ErrorCode::kMalformed, "GGUF value of type {} used as {}", TypeName(v.type), wanted);
}

}  // namespace

// ---- GgufValue ----

int64_t GgufValue::AsInt() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > uint64_t(std::numeric_limits<int64_t>::max()))
      Throw(ErrorCode::kOutOfRange, "GGUF {} value {} does not fit in int64", TypeName(type), *u);
    return int64_t(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  TypeMismatch(*this, "an integer");
}

double GgufValue::AsFloat() const {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v)) return double(*u);
  if (const auto* i = std::get_if<int64_t>(&v)) return double(*i);
  TypeMismatch(*this, "a number");
}

bool GgufValue::AsBool() const {
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  TypeMismatch(*this, "a bool");
}

const std::string& GgufValue::AsString() const {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  TypeMismatch(*this, "a string");
}

const GgufArray& GgufValue::AsArray() const {
  if (const auto* a = std::get_if<GgufArray>(&v)) return *a;
  TypeMismatch(*this, "an array");
}

TensorView GgufTensorInfo::view() const {
  return TensorView::Contiguous(const_cast<uint8_t*>(data), dtype, shape.data(), ndim);
}

// ---- GgufFile ----

GgufFile::~GgufFile() = default;

std::unique_ptr<GgufFile> GgufFile::Open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->mapping_ = std::make_unique<MappedFile>(path);
  f->Parse(f->mapping_->data(), f->mapping_->size());
  return f;
}

std::unique_ptr<GgufFile> GgufFile::FromMemory(const uint8_t* data, size_t size,
                                               std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(name);
  f->Parse(data, size);
  return f;
}

void GgufFile::Parse(const uint8_t* data, size_t size) {
  static const uint8_t kEmpty = 0;
  if (data == nullptr) data = &kEmpty;  // empty mapping: every read fails the bounds check
  Reader r(data, size, path_);

  if (size < 4) r.Fail(ErrorCode::kMalformed, "not a GGUF file (shorter than the magic)", 0);
  uint32_t magic = r.Read<uint32_t>("magic");
  if (magic != kMagic)
    r.Fail(ErrorCode::kMalformed,
           fmt::format("not a GGUF file (magic {:02x} {:02x} {:02x} {:02x})", data[0], data[1],
                       data[2], data[3]),
           0);
  version_ = r.Read<uint32_t>("version");
  if (version_ == 1)
    r.Fail(ErrorCode::kUnsupported,
           "GGUF v1 is not supported (32-bit counts; re-convert the model to v3)", 4);
  if (version_ != 2 && version_ != 3) {
    bool swapped = (version_ & 0xffff) == 0 && version_ != 0;
    r.Fail(ErrorCode::kUnsupported,
           fmt::format("GGUF version {} is not supported{}", version_,
                       swapped ? " (a big-endian file?)" : ""),
           4);
  }

  // Tensor infos take at least 24 bytes (name len, n_dims, type, offset); a KV pair at least
  // 13 (key len, type, a 1-byte value).
  uint64_t num_tensors = r.ReadCount("tensor count", 24);
  uint64_t num_kv = r.ReadCount("metadata key/value count", 13);

  size_t alignment_kv_pos = 0;  // byte offset of general.alignment, for its error message
  for (uint64_t i = 0; i < num_kv; ++i) {
    size_t at = r.pos();
    std::string key = r.ReadString(fmt::format("metadata key #{}", i));
    if (key.empty()) r.Fail(ErrorCode::kMalformed, fmt::format("metadata key #{} is empty", i), at);
    GgufType type = r.ReadType(fmt::format("metadata '{}'", key));
    GgufValue value = r.ReadValue(type, fmt::format("metadata '{}'", key), 0);
    if (metadata_.count(key))
      r.Fail(ErrorCode::kMalformed, fmt::format("duplicate metadata key '{}'", key), at);
    if (key == "general.alignment") alignment_kv_pos = at;
    metadata_.emplace(std::move(key), std::move(value));
  }

  if (const GgufValue* a = Find("general.alignment")) {
    uint64_t align = 0;  // 0 = not a positive integer
    if (const auto* u = std::get_if<uint64_t>(&a->v)) align = *u;
    if (const auto* v = std::get_if<int64_t>(&a->v); v && *v > 0) align = uint64_t(*v);
    if (align == 0 || align > kMaxAlignment || (align & (align - 1)) != 0)
      r.Fail(ErrorCode::kMalformed,
             fmt::format("general.alignment must be a power of two integer in [1, 2^30] "
                         "(a {} value here)",
                         TypeName(a->type)),
             alignment_kv_pos);
    alignment_ = align;
  }

  std::vector<size_t> info_pos;  // byte offset of each tensor's info record, for messages
  tensors_.reserve(size_t(num_tensors));
  for (uint64_t i = 0; i < num_tensors; ++i) {
    size_t at = r.pos();
    info_pos.push_back(at);
    GgufTensorInfo t;
    t.name = r.ReadString(fmt::format("tensor #{} name", i));
    std::string what = fmt::format("tensor '{}'", t.name);
    size_t dims_at = r.pos();
    uint32_t ndim = r.Read<uint32_t>(what + " n_dims");
    if (ndim > uint32_t(kMaxGgufDims))
      r.Fail(ErrorCode::kMalformed, fmt::format("{} has {} dims (max {})", what, ndim, kMaxGgufDims),
             dims_at);
    t.ndim = int(ndim);
    int64_t numel = 1;
    std::array<int64_t, kMaxGgufDims> ne{};
    for (uint32_t d = 0; d < ndim; ++d) {
      size_t ne_at = r.pos();
      uint64_t n = r.Read<uint64_t>(what + " ne");
      if (n > uint64_t(std::numeric_limits<int64_t>::max()) ||
          (n != 0 && numel > std::numeric_limits<int64_t>::max() / int64_t(n)))
        r.Fail(ErrorCode::kMalformed, fmt::format("{} element count overflows", what), ne_at);
      ne[d] = int64_t(n);
      numel *= int64_t(n);
    }
    for (uint32_t d = 0; d < ndim; ++d) t.shape[ndim - 1 - d] = ne[d];  // row-major
    size_t type_at = r.pos();
    uint32_t ggml_type = r.Read<uint32_t>(what + " type");
    std::optional<DType> dt = FromGgmlType(ggml_type);
    if (!dt) {
      if (IsRetiredGgmlType(ggml_type))
        r.Fail(ErrorCode::kUnsupported,
               fmt::format("{} uses retired ggml type {}; re-convert the model", what, ggml_type),
               type_at);
      r.Fail(ErrorCode::kMalformed, fmt::format("{} has unknown ggml type {}", what, ggml_type),
             type_at);
    }
    t.dtype = *dt;
    const DTypeInfo& info = Info(t.dtype);
    if (ndim > 0 && ne[0] % info.block_size != 0)
      r.Fail(ErrorCode::kMalformed,
             fmt::format("{}: row length {} is not a multiple of the {} block size {}", what,
                         ne[0], info.name, info.block_size),
             dims_at);
    std::optional<int64_t> bytes = BytesFor(t.dtype, numel);
    if (!bytes)
      r.Fail(ErrorCode::kMalformed, fmt::format("{} byte size overflows", what), dims_at);
    t.nbytes = uint64_t(*bytes);
    size_t off_at = r.pos();
    t.offset = r.Read<uint64_t>(what + " offset");
    if (t.offset % alignment_ != 0)
      r.Fail(ErrorCode::kMalformed,
             fmt::format("{} data offset {} is not a multiple of the alignment {}", what,
                         t.offset, alignment_),
             off_at);
    if (tensor_index_.count(t.name))
      r.Fail(ErrorCode::kMalformed, fmt::format("duplicate tensor name '{}'", t.name), at);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the first alignment boundary after the tensor table.
  uint64_t header_end = r.pos();
  uint64_t data_start = (header_end + alignment_ - 1) / alignment_ * alignment_;
  uint64_t data_size = data_start <= size ? size - data_start : 0;
  if (data_start > size && !tensors_.empty())
    r.Fail(ErrorCode::kMalformed,
           fmt::format("data section would start at {}, past the end of the {}-byte file",
                       data_start, size),
           header_end);

  for (size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensorInfo& t = tensors_[i];
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      r.Fail(ErrorCode::kMalformed,
             fmt::format("tensor '{}' data [{}, +{}) lies outside the {}-byte data section "
                         "(file truncated?)",
                         t.name, t.offset, t.nbytes, data_size),
             info_pos[i]);
    t.data = data + data_start + t.offset;
  }

  // No two tensors may share bytes.
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensorInfo& prev = tensors_[order[k - 1]];
    const GgufTensorInfo& cur = tensors_[order[k]];
    if (prev.nbytes > 0 && cur.nbytes > 0 && prev.offset + prev.nbytes > cur.offset)
      r.Fail(ErrorCode::kMalformed,
             fmt::format("tensors '{}' and '{}' overlap in the data section", prev.name, cur.name),
             info_pos[order[k]]);
  }
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
// Re-throws a typed-access failure with the key and file named.
template <typename F>
auto WithKey(const std::string& path, std::string_view key, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    Throw(e.code(), "{}: metadata '{}': {}", path, key, e.what());
  }
}
}  // namespace

int64_t GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) Throw(ErrorCode::kNotFound, "{}: metadata key '{}' not found", path_, key);
  return WithKey(path_, key, [&] { return v->AsInt(); });
}

int64_t GgufFile::GetIntOr(std::string_view key, int64_t def) const {
  const GgufValue* v = Find(key);
  return v ? WithKey(path_, key, [&] { return v->AsInt(); }) : def;
}

double GgufFile::GetFloatOr(std::string_view key, double def) const {
  const GgufValue* v = Find(key);
  return v ? WithKey(path_, key, [&] { return v->AsFloat(); }) : def;
}

std::string GgufFile::GetStringOr(std::string_view key, std::string def) const {
  const GgufValue* v = Find(key);
  return v ? WithKey(path_, key, [&] { return v->AsString(); }) : def;
}

std::string GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) Throw(ErrorCode::kNotFound, "{}: metadata key '{}' not found", path_, key);
  return WithKey(path_, key, [&] { return v->AsString(); });
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace pg::io
