// Crafted bad GGUF files: each must throw pg::Error with a clear message (file name, what,
// byte offset), never crash or read out of bounds (run under the `debug` preset's ASan too).
#include <gtest/gtest.h>

#include <random>

#include "io/gguf.h"
#include "unit/io/gguf_builder.h"
#include "unit/io/test_util.h"

namespace pg::io {
namespace {

using testing::BuiltGguf;
using testing::ExpectError;
using testing::GgufBuilder;
using testing::Poke;

// A small valid file: a few KVs of several types and three tensors (F32, Q8_0, F16).
GgufBuilder ValidBuilder() {
  GgufBuilder b;
  b.AddString("general.architecture", "llama");
  b.AddU32("llama.block_count", 3);
  b.AddF32("llama.rope.freq_base", 10000.f);
  b.AddBool("tokenizer.ggml.add_bos_token", true);
  b.AddStringArray("tokenizer.ggml.tokens", {"<s>", "a", "Ġb", "ü"});
  std::mt19937 rng(3);
  auto bytes = [&](size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& c : v) c = uint8_t(rng());
    return v;
  };
  b.AddTensor({"a.f32", {7, 3}, 0, bytes(7 * 3 * 4)});
  b.AddTensor({"b.q8_0", {64, 2}, 8, bytes(2 * 2 * 34)});
  b.AddTensor({"c.f16", {5}, 1, bytes(10)});
  return b;
}

std::string Parse(const std::vector<uint8_t>& bytes, ErrorCode code) {
  std::string msg = ExpectError(
      [&] { GgufFile::FromMemory(bytes.data(), bytes.size(), "bad.gguf"); }, code);
  EXPECT_NE(msg.find("bad.gguf"), std::string::npos) << msg;
  return msg;
}

void ExpectContains(const std::string& msg, std::string_view part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nmissing: " << part;
}

TEST(GgufMalformedTest, ValidBaselineParses) {
  BuiltGguf g = ValidBuilder().Build();
  auto f = GgufFile::FromMemory(g.bytes.data(), g.bytes.size());
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->Find("tokenizer.ggml.tokens")->AsArray()[3].AsString(), "ü");
}

// Every prefix of a valid file shorter than the end of its last tensor's data must throw.
TEST(GgufMalformedTest, EveryTruncationThrows) {
  BuiltGguf g = ValidBuilder().Build();
  for (size_t len = 0; len < g.bytes.size(); ++len) {
    std::vector<uint8_t> prefix(g.bytes.begin(), g.bytes.begin() + long(len));
    // A copy of exactly `len` bytes so ASan sees any read past the end.
    try {
      GgufFile::FromMemory(prefix.data(), prefix.size(), "bad.gguf");
      ADD_FAILURE() << "prefix of " << len << " bytes parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMalformed) << len << ": " << e.what();
    }
  }
}

TEST(GgufMalformedTest, MagicAndVersion) {
  BuiltGguf g = ValidBuilder().Build();
  auto bad = g.bytes;
  bad[0] = 'X';
  ExpectContains(Parse(bad, ErrorCode::kMalformed), "not a GGUF file");
  bad = g.bytes;
  Poke<uint32_t>(bad, 4, 1);
  ExpectContains(Parse(bad, ErrorCode::kUnsupported), "v1");
  Poke<uint32_t>(bad, 4, 4);
  ExpectContains(Parse(bad, ErrorCode::kUnsupported), "version 4");
  Poke<uint32_t>(bad, 4, 0x03000000);
  ExpectContains(Parse(bad, ErrorCode::kUnsupported), "big-endian");
}

TEST(GgufMalformedTest, AbsurdCountsRejectedBeforeAllocation) {
  BuiltGguf g = ValidBuilder().Build();
  auto bad = g.bytes;
  Poke<uint64_t>(bad, g.tensor_count_pos, uint64_t(1) << 60);
  std::string msg = Parse(bad, ErrorCode::kMalformed);
  ExpectContains(msg, "tensor count");
  ExpectContains(msg, "at byte 8");
  bad = g.bytes;
  Poke<uint64_t>(bad, g.kv_count_pos, ~uint64_t(0));
  ExpectContains(Parse(bad, ErrorCode::kMalformed), "key/value count");
  // The string array's element count (after key, type id 9, element type 8).
  bad = g.bytes;
  size_t arr = g.kv_pos[4] + 8 + std::string("tokenizer.ggml.tokens").size() + 4 + 4;
  Poke<uint64_t>(bad, arr, uint64_t(1) << 60);
  msg = Parse(bad, ErrorCode::kMalformed);
  ExpectContains(msg, "array length");
  ExpectContains(msg, "at byte " + std::to_string(arr));
  // A string length far beyond the file.
  bad = g.bytes;
  Poke<uint64_t>(bad, g.kv_pos[0], uint64_t(1) << 62);
  ExpectContains(Parse(bad, ErrorCode::kMalformed), "truncated");
}

TEST(GgufMalformedTest, AbsurdArrayOfEmptyArraysRejected) {
  GgufBuilder b;
  testing::ByteWriter w;
  w.Put<uint32_t>(9);                     // element type: array
  w.Put<uint64_t>(uint64_t(1) << 40);     // count
  b.AddRaw("x", 9, w.bytes);
  auto g = b.Build();
  ExpectContains(Parse(g.bytes, ErrorCode::kMalformed), "array length");
}

TEST(GgufMalformedTest, DeeplyNestedArraysRejected) {
  GgufBuilder b;
  testing::ByteWriter w;
  for (int i = 0; i < 20; ++i) {
    w.Put<uint32_t>(9);
    w.Put<uint64_t>(1);
  }
  w.Put<uint32_t>(4);
  w.Put<uint64_t>(0);
  b.AddRaw("deep", 9, w.bytes);
  ExpectContains(Parse(b.Build().bytes, ErrorCode::kMalformed), "nested deeper");
}

TEST(GgufMalformedTest, BadValuesAndTypes) {
  {
    GgufBuilder b;
    b.AddRaw("t", 13, GgufBuilder::Enc<uint32_t>(0));
    ExpectContains(Parse(b.Build().bytes, ErrorCode::kMalformed), "unknown GGUF value type 13");
  }
  {
    GgufBuilder b;
    b.AddRaw("flag", 7, GgufBuilder::Enc<uint8_t>(2));
    ExpectContains(Parse(b.Build().bytes, ErrorCode::kMalformed), "bool byte 2");
  }
  {
    GgufBuilder b;
    b.AddString("", "x");
    ExpectContains(Parse(b.Build().bytes, ErrorCode::kMalformed), "empty");
  }
}

TEST(GgufMalformedTest, InvalidUtf8) {
  const std::vector<std::string> bad_strings = {
      "\xff", "abc\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ok\x80"};
  for (const auto& s : bad_strings) {
    SCOPED_TRACE(::testing::PrintToString(s));
    GgufBuilder b;
    b.AddU32("key." + s, 1);
    ExpectContains(Parse(b.Build().bytes, ErrorCode::kMalformed), "not valid UTF-8");
    GgufBuilder v;
    v.AddString("general.name", s);
    ExpectContains(Parse(v.Build().bytes, ErrorCode::kMalformed), "not valid UTF-8");
    GgufBuilder t;
    t.AddTensor({"w" + s, {4}, 0, std::vector<uint8_t>(16)});
    ExpectContains(Parse(t.Build().bytes, ErrorCode::kMalformed), "not valid UTF-8");
  }
}

TEST(GgufMalformedTest, Duplicates) {
  GgufBuilder b = ValidBuilder();
  b.AddU32("llama.block_count", 4);
  ExpectContains(Parse(b.Build().bytes, ErrorCode::kMalformed),
                 "duplicate metadata key 'llama.block_count'");
  GgufBuilder t = ValidBuilder();
  t.AddTensor({"a.f32", {8}, 0, std::vector<uint8_t>(32)});
  ExpectContains(Parse(t.Build().bytes, ErrorCode::kMalformed), "duplicate tensor name 'a.f32'");
}

TEST(GgufMalformedTest, Alignment) {
  for (uint32_t a : {0u, 48u, 3u}) {
    GgufBuilder b;
    b.AddU32("general.name_first", 1);
    b.AddU32("general.alignment", a);
    BuiltGguf g = b.Build();
    std::string msg = Parse(g.bytes, ErrorCode::kMalformed);
    ExpectContains(msg, "power of two");
    ExpectContains(msg, "at byte " + std::to_string(g.kv_pos[1]));
  }
  GgufBuilder u;
  u.AddU64("general.alignment", uint64_t(1) << 63);
  ExpectContains(Parse(u.Build().bytes, ErrorCode::kMalformed), "power of two");
  GgufBuilder s;
  s.AddString("general.alignment", "32");
  ExpectContains(Parse(s.Build().bytes, ErrorCode::kMalformed), "general.alignment");
}

TEST(GgufMalformedTest, TensorTable) {
  BuiltGguf g = ValidBuilder().Build();
  // Unknown ggml type: the message names the tensor.
  auto bad = g.bytes;
  Poke<uint32_t>(bad, g.tensor_type_pos[1], 99);
  std::string msg = Parse(bad, ErrorCode::kMalformed);
  ExpectContains(msg, "'b.q8_0'");
  ExpectContains(msg, "unknown ggml type 99");
  ExpectContains(msg, "at byte " + std::to_string(g.tensor_type_pos[1]));
  Poke<uint32_t>(bad, g.tensor_type_pos[1], 4);  // retired Q4_2
  ExpectContains(Parse(bad, ErrorCode::kUnsupported), "retired");
  // Offset outside the data section.
  bad = g.bytes;
  Poke<uint64_t>(bad, g.tensor_offset_pos[2], uint64_t(1) << 40);
  ExpectContains(Parse(bad, ErrorCode::kMalformed), "outside");
  bad = g.bytes;
  Poke<uint64_t>(bad, g.tensor_offset_pos[2], ~uint64_t(0) - 31);  // offset + nbytes wraps
  ExpectContains(Parse(bad, ErrorCode::kMalformed), "outside");
  // Misaligned offset.
  bad = g.bytes;
  Poke<uint64_t>(bad, g.tensor_offset_pos[1], 4);
  ExpectContains(Parse(bad, ErrorCode::kMalformed), "not a multiple of the alignment");
  // Two tensors on the same bytes.
  bad = g.bytes;
  Poke<uint64_t>(bad, g.tensor_offset_pos[1], 0);
  ExpectContains(Parse(bad, ErrorCode::kMalformed), "overlap");
  // Too many dims.
  bad = g.bytes;
  size_t ndim_pos = g.tensor_info_pos[0] + 8 + 5;
  Poke<uint32_t>(bad, ndim_pos, 5);
  ExpectContains(Parse(bad, ErrorCode::kMalformed), "5 dims");
}

TEST(GgufMalformedTest, ShapeChecks) {
  {
    GgufBuilder b;  // Q4_0 row of 33 elements: not whole blocks.
    b.AddTensor({"q", {33}, 2, std::vector<uint8_t>(18)});
    ExpectContains(Parse(b.Build().bytes, ErrorCode::kMalformed), "not a multiple");
  }
  {
    GgufBuilder b;  // 2^40 * 2^40 elements overflows int64.
    b.AddTensor({"huge", {uint64_t(1) << 40, uint64_t(1) << 40}, 0, {}});
    ExpectContains(Parse(b.Build().bytes, ErrorCode::kMalformed), "overflows");
  }
  {
    GgufBuilder b;  // 2^61 f32 elements: count fits, byte size overflows.
    b.AddTensor({"big", {uint64_t(1) << 61}, 0, {}});
    ExpectContains(Parse(b.Build().bytes, ErrorCode::kMalformed), "overflows");
  }
  {
    GgufBuilder b;  // plausible size, but the data is missing.
    b.AddTensor({"w", {1024, 1024}, 0, std::vector<uint8_t>(64)});
    ExpectContains(Parse(b.Build().bytes, ErrorCode::kMalformed), "outside");
  }
}

// Random single-byte and multi-byte corruption: pg::Error or success, never a crash.
TEST(GgufMalformedTest, RandomCorruptionNeverCrashes) {
  BuiltGguf g = ValidBuilder().Build();
  std::mt19937_64 rng(11);
  int errors = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto bad = g.bytes;
    int flips = 1 + int(rng() % 4);
    for (int i = 0; i < flips; ++i) bad[rng() % bad.size()] = uint8_t(rng());
    try {
      auto f = GgufFile::FromMemory(bad.data(), bad.size(), "bad.gguf");
      for (const auto& t : f->tensors()) {  // whatever parsed must lie inside the buffer
        ASSERT_GE(t.data, bad.data());
        ASSERT_LE(t.data + t.nbytes, bad.data() + bad.size());
      }
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 100);  // the corruption does hit checked fields
}

}  // namespace
}  // namespace pg::io
