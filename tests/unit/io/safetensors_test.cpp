// safetensors reader: files written by PyPI's `safetensors` (tools/golden/make_io_fixtures.py)
// compared with the values numpy recorded, plus crafted bad files.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "unit/io/test_util.h"

namespace pg::io {
namespace {

using nlohmann::json;
using testing::ExpectError;

const std::string kFixtures = "tests/data/io/fixtures/";

json LoadExpect() {
  std::ifstream f(kFixtures + "expect.json");
  EXPECT_TRUE(f.good()) << "run tools/golden/make_io_fixtures.py";
  return json::parse(f);
}

std::vector<double> Values(const SafetensorsTensorInfo& t) {
  std::vector<double> out;
  int64_t n = t.view().numel();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = t.data + i * Info(t.dtype).block_bytes;
    switch (t.dtype) {
      case DType::kF32: { float x; std::memcpy(&x, p, 4); out.push_back(x); break; }
      case DType::kF16: { uint16_t h; std::memcpy(&h, p, 2); out.push_back(F16ToF32(h)); break; }
      case DType::kI64: { int64_t x; std::memcpy(&x, p, 8); out.push_back(double(x)); break; }
      case DType::kBool: case DType::kU8: out.push_back(*p); break;
      default: ADD_FAILURE() << "unexpected dtype " << Name(t.dtype);
    }
  }
  return out;
}

void ExpectTensor(const SafetensorsTensorInfo& t, const json& want) {
  SCOPED_TRACE(t.name);
  EXPECT_EQ(t.dtype, *FromSafetensorsName(want["dtype"].get<std::string>()));
  EXPECT_EQ(std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.ndim),
            want["shape"].get<std::vector<int64_t>>());
  EXPECT_EQ(int64_t(t.nbytes()), t.view().nbytes());
  std::vector<double> got = Values(t);
  std::vector<double> exp;
  for (const auto& v : want["values"]) exp.push_back(v.get<double>());
  EXPECT_EQ(got, exp);
}

TEST(SafetensorsTest, SingleFileMatchesPythonWriter) {
  json expect = LoadExpect()["single.safetensors"];
  auto f = SafetensorsFile::Open(kFixtures + "single.safetensors");
  using Meta = std::map<std::string, std::string>;
  EXPECT_EQ(f->metadata(), expect["metadata"].get<Meta>());
  ASSERT_EQ(f->tensors().size(), expect["tensors"].size());
  for (const auto& [name, want] : expect["tensors"].items()) {
    const SafetensorsTensorInfo* t = f->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    ExpectTensor(*t, want);
  }
  for (size_t i = 1; i < f->tensors().size(); ++i)
    EXPECT_LE(f->tensors()[i - 1].begin, f->tensors()[i].begin);  // file order
  EXPECT_EQ(f->FindTensor("nope"), nullptr);
}

TEST(SafetensorsTest, ShardedModel) {
  json expect = LoadExpect()["sharded"];
  for (std::string path : {kFixtures + "sharded", kFixtures + "sharded/model.safetensors.index.json"}) {
    SCOPED_TRACE(path);
    auto m = SafetensorsModel::Open(path);
    EXPECT_EQ(m->num_shards(), expect["num_shards"].get<size_t>());
    EXPECT_EQ(m->index_metadata().at("total_size"),
              std::to_string(expect["total_size"].get<int64_t>()));
    std::vector<std::string> names;
    for (const auto& [name, want] : expect["tensors"].items()) {
      names.push_back(name);
      ExpectTensor(m->GetTensor(name), want);
    }
    EXPECT_EQ(m->TensorNames(), names);  // json object keys are sorted too
    ExpectError([&] { m->GetTensor("model.absent"); }, ErrorCode::kNotFound);
  }
  auto single = SafetensorsModel::Open(kFixtures + "single.safetensors");
  EXPECT_EQ(single->num_shards(), 1u);
  EXPECT_NE(single->FindTensor("model.embed.weight"), nullptr);
}

// ---- crafted files ----

std::vector<uint8_t> Image(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8);
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string Parse(const std::vector<uint8_t>& bytes, ErrorCode code) {
  std::string msg = ExpectError(
      [&] { SafetensorsFile::FromMemory(bytes.data(), bytes.size(), "bad.safetensors"); }, code);
  EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
  return msg;
}

void ExpectContains(const std::string& msg, std::string_view part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nmissing: " << part;
}

TEST(SafetensorsMalformedTest, HeaderLength) {
  ExpectContains(Parse({1, 2, 3}, ErrorCode::kMalformed), "truncated");
  auto img = Image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", {0, 0, 0, 0});
  auto bad = img;
  uint64_t n = 1000;
  std::memcpy(bad.data(), &n, 8);
  ExpectContains(Parse(bad, ErrorCode::kMalformed), "runs past the end");
  n = uint64_t(1) << 62;
  std::memcpy(bad.data(), &n, 8);
  ExpectContains(Parse(bad, ErrorCode::kMalformed), "exceeds");
}

TEST(SafetensorsMalformedTest, HeaderJson) {
  std::vector<uint8_t> d4(4, 1);
  ExpectContains(Parse(Image("{not json", d4), ErrorCode::kMalformed), "invalid JSON");
  ExpectContains(Parse(Image("[1,2]", d4), ErrorCode::kMalformed), "expected an object");
  ExpectContains(Parse(Image(R"({"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})", d4),
                       ErrorCode::kMalformed), "invalid JSON");  // number beyond double range
  ExpectContains(Parse(Image("{\"\xff\":{}}", d4), ErrorCode::kMalformed), "invalid JSON");
  ExpectContains(
      Parse(Image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                  R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d4),
            ErrorCode::kMalformed),
      "duplicate JSON key 'a'");
  ExpectContains(Parse(Image(R"({"__metadata__":{"k":1}})", {}), ErrorCode::kMalformed),
                 "expected a string");
}

TEST(SafetensorsMalformedTest, Entries) {
  std::vector<uint8_t> d8(8, 7);
  auto entry = [&](const std::string& body) {
    return Image("{\"w\":" + body + "}", d8);
  };
  ExpectContains(Parse(entry(R"({"dtype":"F33","shape":[2],"data_offsets":[0,8]})"),
                       ErrorCode::kMalformed), "unknown dtype 'F33'");
  ExpectContains(Parse(entry(R"({"dtype":"U32","shape":[2],"data_offsets":[0,8]})"),
                       ErrorCode::kUnsupported), "U32");
  ExpectContains(Parse(entry(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"),
                       ErrorCode::kMalformed), "shape[0]");
  ExpectContains(Parse(entry(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})"),
                       ErrorCode::kMalformed), "shape[0]");
  ExpectContains(Parse(entry(R"({"dtype":"F32","shape":[1,1,1,1,1,1,2],"data_offsets":[0,8]})"),
                       ErrorCode::kUnsupported), "7 dims");
  ExpectContains(Parse(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,12]})"),
                       ErrorCode::kMalformed), "outside");
  ExpectContains(Parse(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"),
                       ErrorCode::kMalformed), "outside");
  ExpectContains(Parse(entry(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"),
                       ErrorCode::kMalformed), "needs 12");
  ExpectContains(Parse(entry(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
                       ErrorCode::kMalformed), "overflow");
  ExpectContains(Parse(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"),
                       ErrorCode::kMalformed), "data_offsets");
  ExpectContains(Parse(entry(R"({"dtype":"F32","shape":[2]})"), ErrorCode::kMalformed),
                 "lacks");
  ExpectContains(Parse(entry(R"("F32")"), ErrorCode::kMalformed), "expected an object");
  ExpectContains(Parse(entry(R"({"dtype":7,"shape":[2],"data_offsets":[0,8]})"),
                       ErrorCode::kMalformed), "dtype");
  ExpectContains(Parse(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551616]})"),
                       ErrorCode::kMalformed), "data_offsets");
}

TEST(SafetensorsMalformedTest, Overlap) {
  auto img = Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"I16","shape":[2],"data_offsets":[6,10]}})",
                   std::vector<uint8_t>(10, 1));
  ExpectContains(Parse(img, ErrorCode::kMalformed), "overlap");
  // Touching ranges and empty tensors anywhere are fine.
  auto ok = Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("e":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},)"
                  R"("b":{"dtype":"I16","shape":[1],"data_offsets":[8,10]}})",
                  std::vector<uint8_t>(10, 1));
  auto f = SafetensorsFile::FromMemory(ok.data(), ok.size());
  EXPECT_EQ(f->tensors().size(), 3u);
}

TEST(SafetensorsMalformedTest, EveryTruncationThrows) {
  auto bytes = testing::ReadAll(kFixtures + "single.safetensors");
  ASSERT_GT(bytes.size(), 100u);
  for (size_t len = 0; len < bytes.size(); ++len) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + long(len));
    try {
      SafetensorsFile::FromMemory(prefix.data(), prefix.size(), "bad.safetensors");
      ADD_FAILURE() << "prefix of " << len << " bytes parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMalformed) << len << ": " << e.what();
    }
  }
}

TEST(SafetensorsMalformedTest, RandomCorruptionNeverCrashes) {
  auto bytes = testing::ReadAll(kFixtures + "single.safetensors");
  std::mt19937_64 rng(13);
  int errors = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto bad = bytes;
    size_t hdr = 8 + 400;  // mostly hit the header, where the structure is
    int flips = 1 + int(rng() % 3);
    for (int i = 0; i < flips; ++i) bad[rng() % std::min(hdr, bad.size())] = uint8_t(rng());
    try {
      auto f = SafetensorsFile::FromMemory(bad.data(), bad.size(), "bad.safetensors");
      for (const auto& t : f->tensors()) {
        ASSERT_GE(t.data, bad.data());
        ASSERT_LE(t.data + t.nbytes(), bad.data() + bad.size());
      }
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 100);
}

TEST(SafetensorsMalformedTest, BadIndex) {
  testing::TempDir dir;
  std::filesystem::copy_file(kFixtures + "sharded/model-00001-of-00002.safetensors",
                             dir.File("a.safetensors"));
  auto write_index = [&](const std::string& text) {
    std::ofstream(dir.File("model.safetensors.index.json")) << text;
  };
  write_index(R"({"weight_map": {"model.bytes": "missing.safetensors"}})");
  ExpectError([&] { SafetensorsModel::Open(dir.path().string()); }, ErrorCode::kNotFound);
  write_index(R"({"weight_map": {"model.nothere": "a.safetensors"}})");
  std::string msg = ExpectError([&] { SafetensorsModel::Open(dir.path().string()); },
                                ErrorCode::kMalformed);
  ExpectContains(msg, "model.nothere");
  write_index(R"({"weight_map": {"model.bytes": "../a.safetensors"}})");
  ExpectError([&] { SafetensorsModel::Open(dir.path().string()); }, ErrorCode::kMalformed);
  write_index(R"({"metadata": {}})");
  ExpectContains(ExpectError([&] { SafetensorsModel::Open(dir.path().string()); },
                             ErrorCode::kMalformed), "weight_map");
  write_index(R"({"weight_map": {"model.bytes": 3}})");
  ExpectError([&] { SafetensorsModel::Open(dir.path().string()); }, ErrorCode::kMalformed);
  testing::TempDir empty;
  ExpectError([&] { SafetensorsModel::Open(empty.path().string()); }, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace pg::io
