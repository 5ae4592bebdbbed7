// The embedded model's header and tensor table against a golden JSON written by PyPI's
// `gguf` package (tools/golden/gguf_metadata.py). The model file must be present: a missing
// file FAILS the test (run scripts/lib/setup.sh to fetch it).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "io/gguf.h"
#include "unit/io/test_util.h"

namespace pg::io {
namespace {

using nlohmann::json;

constexpr const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr const char* kGolden = "tests/data/io/smollm2_135m_q4_1.metadata.json";

std::string_view TypeName(GgufType t) {
  static const char* kNames[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                 "bool", "string", "array", "u64", "i64", "f64"};
  return kNames[uint32_t(t)];
}

void ExpectScalar(const GgufValue& v, const json& want, const std::string& where) {
  if (want.is_string()) EXPECT_EQ(v.AsString(), want.get<std::string>()) << where;
  else if (want.is_boolean()) EXPECT_EQ(v.AsBool(), want.get<bool>()) << where;
  else if (want.is_number_float()) EXPECT_EQ(v.AsFloat(), want.get<double>()) << where;
  else EXPECT_EQ(v.AsInt(), want.get<int64_t>()) << where;
}

class EmbeddedModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModel)) return;  // each test fails below with the reason
    file_ = GgufFile::Open(kModel).release();
    std::ifstream g(kGolden);
    golden_ = new json(json::parse(g));
  }
  static void TearDownTestSuite() {
    delete file_;
    delete golden_;
  }
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kModel))
        << kModel << " is missing: run scripts/lib/setup.sh to fetch the embedded model";
    ASSERT_NE(file_, nullptr);
  }
  static GgufFile* file_;
  static json* golden_;
};
GgufFile* EmbeddedModelTest::file_ = nullptr;
json* EmbeddedModelTest::golden_ = nullptr;

TEST_F(EmbeddedModelTest, HeaderMatchesGolden) {
  const json& g = *golden_;
  EXPECT_EQ(file_->version(), g["version"].get<uint32_t>());
  EXPECT_EQ(file_->alignment(), g["alignment"].get<uint64_t>());
}

TEST_F(EmbeddedModelTest, MetadataMatchesGolden) {
  const json& meta = (*golden_)["metadata"];
  ASSERT_EQ(file_->metadata().size(), meta.size());
  for (const auto& [key, want] : meta.items()) {
    const GgufValue* v = file_->Find(key);
    ASSERT_NE(v, nullptr) << key;
    ASSERT_EQ(TypeName(v->type), want["type"].get<std::string>()) << key;
    if (v->type != GgufType::kArray) {
      ExpectScalar(*v, want["value"], key);
      continue;
    }
    EXPECT_EQ(TypeName(v->array_type), want["element_type"].get<std::string>()) << key;
    const GgufArray& arr = v->AsArray();
    ASSERT_EQ(arr.size(), want["length"].get<size_t>()) << key;
    if (want.contains("values")) {
      for (size_t i = 0; i < arr.size(); ++i) ExpectScalar(arr[i], want["values"][i], key);
    } else {
      const json& head = want["head"];
      const json& tail = want["tail"];
      for (size_t i = 0; i < head.size(); ++i) ExpectScalar(arr[i], head[i], key + " head");
      for (size_t i = 0; i < tail.size(); ++i)
        ExpectScalar(arr[arr.size() - tail.size() + i], tail[i], key + " tail");
    }
  }
  // Spot values the model layer relies on.
  EXPECT_EQ(file_->GetString("general.architecture"), "llama");
  EXPECT_EQ(file_->GetInt("llama.embedding_length"), 576);
  EXPECT_EQ(file_->GetString("tokenizer.ggml.pre"), "smollm");
}

TEST_F(EmbeddedModelTest, TensorTableMatchesGolden) {
  const json& tensors = (*golden_)["tensors"];
  ASSERT_EQ(file_->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const json& want = tensors[i];
    const GgufTensorInfo& t = file_->tensors()[i];  // file order is preserved
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, want["name"].get<std::string>());
    EXPECT_EQ(ToGgmlType(t.dtype), want["ggml_type"].get<uint32_t>());
    EXPECT_EQ(std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.ndim),
              want["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(t.offset, want["offset"].get<uint64_t>());
    EXPECT_EQ(t.nbytes, want["nbytes"].get<uint64_t>());
    EXPECT_EQ(file_->FindTensor(t.name), &t);
  }
  const GgufTensorInfo* emb = file_->FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::kQ8_0);
  EXPECT_EQ(emb->view().dim(0), 49152);
  EXPECT_EQ(emb->view().dim(1), 576);
}

// Prefixes of the real header (random cut points through the 1.7 MB of metadata, the tensor
// table and the data): every one throws, none crashes.
TEST_F(EmbeddedModelTest, TruncatedHeaderPrefixesThrow) {
  std::vector<uint8_t> bytes(2 * 1024 * 1024);
  {
    std::ifstream f(kModel, std::ios::binary);
    f.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  std::mt19937_64 rng(5);
  for (int i = 0; i < 60; ++i) {
    size_t len = rng() % bytes.size();
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + long(len));
    testing::ExpectError(
        [&] { GgufFile::FromMemory(prefix.data(), prefix.size(), "prefix.gguf"); },
        ErrorCode::kMalformed);
  }
}

}  // namespace
}  // namespace pg::io
