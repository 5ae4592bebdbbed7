// GGUF reader: files written by PyPI's `gguf` package (tools/golden/make_io_fixtures.py) and
// by the test-side builder, compared against the values the writer recorded.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <random>

#include "core/quant.h"
#include "io/gguf.h"
#include "unit/io/gguf_builder.h"
#include "unit/io/test_util.h"

namespace pg::io {
namespace {

using nlohmann::json;
using testing::ExpectError;
using testing::GgufBuilder;

const char* kFixtures = "tests/data/io/fixtures/";

json LoadExpect() {
  std::ifstream f(std::string(kFixtures) + "expect.json");
  EXPECT_TRUE(f.good()) << "missing fixture expectations; run tools/golden/make_io_fixtures.py";
  return json::parse(f);
}

std::string_view TypeName(GgufType t) {
  static const char* kNames[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                 "bool", "string", "array", "u64", "i64", "f64"};
  return kNames[uint32_t(t)];
}

// Compares one parsed value with the writer's record {type, value | values}.
void ExpectValue(const GgufValue& v, const json& want, const std::string& key) {
  SCOPED_TRACE(key);
  if (want.is_array()) {  // nested array element
    ASSERT_EQ(v.type, GgufType::kArray);
    const GgufArray& arr = v.AsArray();
    ASSERT_EQ(arr.size(), want.size());
    for (size_t i = 0; i < arr.size(); ++i) ExpectValue(arr[i], want[i], key);
    return;
  }
  if (!want.is_object()) {  // a plain scalar inside an array
    if (want.is_string()) EXPECT_EQ(v.AsString(), want.get<std::string>());
    else if (want.is_boolean()) EXPECT_EQ(v.AsBool(), want.get<bool>());
    else if (want.is_number_float()) EXPECT_EQ(v.AsFloat(), want.get<double>());
    else if (want.is_number_unsigned() && want.get<uint64_t>() > uint64_t(INT64_MAX))
      EXPECT_EQ(std::get<uint64_t>(v.v), want.get<uint64_t>());
    else EXPECT_EQ(v.AsInt(), want.get<int64_t>());
    return;
  }
  ASSERT_EQ(TypeName(v.type), want["type"].get<std::string>());
  if (v.type == GgufType::kArray) {
    EXPECT_EQ(TypeName(v.array_type), want["element_type"].get<std::string>());
    ExpectValue(v, want["values"], key);
    return;
  }
  ExpectValue(v, want["value"], key);
}

// Dequantizes / converts a parsed tensor to doubles for comparison with recorded values.
std::vector<double> TensorValues(const GgufTensorInfo& t) {
  int64_t n = t.view().numel();
  std::vector<double> out;
  if (t.dtype == DType::kI32) {
    for (int64_t i = 0; i < n; ++i) {
      int32_t x;
      std::memcpy(&x, t.data + 4 * i, 4);
      out.push_back(x);
    }
    return out;
  }
  std::vector<float> f(static_cast<size_t>(n));
  quant::DequantizeRow(t.dtype, t.data, f.data(), n);
  out.assign(f.begin(), f.end());
  return out;
}

class GgufFixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufFixtureTest, MatchesPythonWriter) {
  const std::string name = GetParam();
  json expect = LoadExpect()[name];
  auto f = GgufFile::Open(kFixtures + name);
  EXPECT_EQ(f->version(), expect["version"].get<uint32_t>());
  EXPECT_EQ(f->alignment(), expect["alignment"].get<uint64_t>());
  for (const auto& [key, want] : expect["metadata"].items()) {
    const GgufValue* v = f->Find(key);
    ASSERT_NE(v, nullptr) << key;
    ExpectValue(*v, want, key);
  }
  EXPECT_EQ(f->metadata().size(), expect["metadata"].size());
  ASSERT_EQ(f->tensors().size(), expect["tensors"].size());
  for (const auto& [tname, want] : expect["tensors"].items()) {
    SCOPED_TRACE(tname);
    const GgufTensorInfo* t = f->FindTensor(tname);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(ToGgmlType(t->dtype), want["ggml_type"].get<uint32_t>());
    std::vector<int64_t> shape(t->shape.begin(), t->shape.begin() + t->ndim);
    EXPECT_EQ(shape, want["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(t->offset % f->alignment(), 0u);
    EXPECT_EQ(int64_t(t->nbytes), t->view().nbytes());
    std::vector<double> got = TensorValues(*t);
    std::vector<double> exp = want["values"].get<std::vector<double>>();
    ASSERT_EQ(got.size(), exp.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], exp[i]) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufFixtureTest,
                         ::testing::Values("basic_v3.gguf", "basic_v2.gguf", "align64.gguf"));

TEST(GgufTest, TypedGetters) {
  auto f = GgufFile::Open(std::string(kFixtures) + "basic_v3.gguf");
  EXPECT_EQ(f->GetInt("test.u32"), 4000000000);
  EXPECT_EQ(f->GetInt("test.i8"), -100);
  EXPECT_EQ(f->GetIntOr("test.absent", 17), 17);
  EXPECT_FLOAT_EQ(float(f->GetFloatOr("test.f32", 0)), 0.1f);
  EXPECT_DOUBLE_EQ(f->GetFloatOr("test.u16", 0), 60000.0);  // integers widen to float
  EXPECT_EQ(f->GetString("general.architecture"), "testarch");
  EXPECT_EQ(f->GetStringOr("absent", "dflt"), "dflt");
  std::string msg = ExpectError([&] { f->GetInt("test.u64"); }, ErrorCode::kOutOfRange);
  EXPECT_NE(msg.find("test.u64"), std::string::npos) << msg;
  msg = ExpectError([&] { f->GetString("test.u8"); }, ErrorCode::kMalformed);
  EXPECT_NE(msg.find("test.u8"), std::string::npos) << msg;
  ExpectError([&] { f->GetInt("absent"); }, ErrorCode::kNotFound);
  ExpectError([&] { f->GetString("absent"); }, ErrorCode::kNotFound);
  ExpectError([&] { f->Find("test.string")->AsArray(); }, ErrorCode::kMalformed);
  ExpectError([&] { f->Find("test.bool")->AsInt(); }, ErrorCode::kMalformed);
  EXPECT_EQ(f->FindTensor("absent"), nullptr);
}

// Random metadata and tensors of awkward shapes through the test-side writer.
TEST(GgufTest, RandomRoundTripThroughBuilder) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    SCOPED_TRACE(trial);
    GgufBuilder b;
    b.version = trial % 2 ? 2 : 3;
    if (trial % 3 == 0) {
      b.alignment = uint64_t(1) << (rng() % 8);  // 1..128
      b.AddU32("general.alignment", uint32_t(b.alignment));
    }
    std::map<std::string, uint32_t> u32s;
    std::map<std::string, std::string> strs;
    int nkv = int(rng() % 9);
    for (int i = 0; i < nkv; ++i) {
      std::string k = "k" + std::to_string(i);
      if (rng() % 2) {
        u32s[k] = uint32_t(rng());
        b.AddU32(k, u32s[k]);
      } else {
        std::string s(rng() % 40, 'a');
        for (auto& c : s) c = char('a' + rng() % 26);
        strs[k] = s;
        b.AddString(k, s);
      }
    }
    struct Want { std::vector<int64_t> shape; DType dtype; std::vector<uint8_t> data; };
    std::map<std::string, Want> want;
    int nt = int(rng() % 6);
    for (int i = 0; i < nt; ++i) {
      testing::BuilderTensor t;
      t.name = "blk." + std::to_string(i) + ".w";
      bool q = rng() % 2;
      t.ggml_type = q ? 8 : 0;  // Q8_0 or F32
      int ndim = 1 + int(rng() % 4);
      int64_t numel = 1;
      for (int d = 0; d < ndim; ++d) {
        uint64_t n = d == 0 ? (q ? 32 * (1 + rng() % 3) : 1 + rng() % 19) : 1 + rng() % 5;
        t.ne.push_back(n);
        numel *= int64_t(n);
      }
      int64_t nbytes = q ? numel / 32 * 34 : numel * 4;
      t.data.resize(size_t(nbytes));
      for (auto& c : t.data) c = uint8_t(rng());
      Want w{{}, q ? DType::kQ8_0 : DType::kF32, t.data};
      for (int d = ndim - 1; d >= 0; --d) w.shape.push_back(int64_t(t.ne[size_t(d)]));
      want[t.name] = w;
      b.AddTensor(t);
    }
    auto built = b.Build();
    auto f = GgufFile::FromMemory(built.bytes.data(), built.bytes.size(), "rt.gguf");
    EXPECT_EQ(f->version(), b.version);
    EXPECT_EQ(f->alignment(), b.alignment);
    for (const auto& [k, v] : u32s) EXPECT_EQ(f->GetInt(k), v);
    for (const auto& [k, v] : strs) EXPECT_EQ(f->GetString(k), v);
    ASSERT_EQ(f->tensors().size(), want.size());
    for (const auto& [name, w] : want) {
      const GgufTensorInfo* t = f->FindTensor(name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(std::vector<int64_t>(t->shape.begin(), t->shape.begin() + t->ndim), w.shape);
      EXPECT_EQ(t->dtype, w.dtype);
      ASSERT_EQ(t->nbytes, w.data.size());
      EXPECT_EQ(uint64_t(t->data - built.bytes.data()), built.data_start + t->offset);
      EXPECT_EQ(0, std::memcmp(t->data, w.data.data(), w.data.size()));
      TensorView v = t->view();
      EXPECT_EQ(v.data, t->data);
      EXPECT_EQ(v.nbytes(), int64_t(w.data.size()));
    }
  }
}

TEST(GgufTest, OpenErrors) {
  ExpectError([] { GgufFile::Open("tests/data/io/no_such_file.gguf"); }, ErrorCode::kNotFound);
  ExpectError([] { GgufFile::Open("tests/data/io"); }, ErrorCode::kIo);
  testing::TempDir dir;
  testing::WriteAll(dir.File("empty.gguf"), {});
  std::string msg = ExpectError([&] { GgufFile::Open(dir.File("empty.gguf")); },
                                ErrorCode::kMalformed);
  EXPECT_NE(msg.find("empty.gguf"), std::string::npos) << msg;
  ExpectError([] { GgufFile::FromMemory(nullptr, 0); }, ErrorCode::kMalformed);
}

}  // namespace
}  // namespace pg::io
