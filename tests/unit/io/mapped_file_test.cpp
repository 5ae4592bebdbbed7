// MappedFile (RAII mmap) and the strict UTF-8 validator.
#include <gtest/gtest.h>

#include <random>

#include "io/mapped_file.h"
#include "io/utf8.h"
#include "unit/io/test_util.h"

namespace pg::io {
namespace {

TEST(MappedFileTest, MapsBytesAndMoves) {
  testing::TempDir dir;
  std::vector<uint8_t> bytes(4099);
  std::mt19937 rng(1);
  for (auto& b : bytes) b = uint8_t(rng());
  testing::WriteAll(dir.File("f.bin"), bytes);
  MappedFile m(dir.File("f.bin"));
  ASSERT_EQ(m.size(), bytes.size());
  EXPECT_EQ(0, std::memcmp(m.data(), bytes.data(), bytes.size()));
  MappedFile moved(std::move(m));
  EXPECT_EQ(moved.size(), bytes.size());
  EXPECT_EQ(m.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(moved.data()[4098], bytes[4098]);
}

TEST(MappedFileTest, EmptyFileAndErrors) {
  testing::TempDir dir;
  testing::WriteAll(dir.File("empty"), {});
  MappedFile e(dir.File("empty"));
  EXPECT_EQ(e.size(), 0u);
  EXPECT_EQ(e.data(), nullptr);
  std::string msg = testing::ExpectError([&] { MappedFile m(dir.File("nope")); },
                                         ErrorCode::kNotFound);
  EXPECT_NE(msg.find("nope"), std::string::npos);
  testing::ExpectError([&] { MappedFile m(dir.path().string()); }, ErrorCode::kIo);
}

TEST(Utf8Test, ValidAndInvalid) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("é ✓ 你好 🙂 \xf4\x8f\xbf\xbf"));  // U+10FFFF is the last valid
  EXPECT_EQ(FindInvalidUtf8("ab\xff"), 2u);
  EXPECT_EQ(FindInvalidUtf8("\xc0\x80"), 0u);          // overlong NUL
  EXPECT_EQ(FindInvalidUtf8("\xe0\x9f\xbf"), 0u);      // overlong 3-byte
  EXPECT_EQ(FindInvalidUtf8("\xf0\x8f\xbf\xbf"), 0u);  // overlong 4-byte
  EXPECT_EQ(FindInvalidUtf8("x\xed\xa0\x80"), 1u);     // surrogate U+D800
  EXPECT_EQ(FindInvalidUtf8("\xf4\x90\x80\x80"), 0u);  // U+110000
  EXPECT_EQ(FindInvalidUtf8("ok\xe4\xbd"), 2u);        // truncated
  EXPECT_EQ(FindInvalidUtf8("\x80"), 0u);              // lone continuation
  EXPECT_EQ(FindInvalidUtf8("\xe4\x41\x41"), 0u);      // bad continuation
}

// Every code point encoded by a straightforward encoder is accepted; every surrogate rejected.
TEST(Utf8Test, AllCodePoints) {
  auto encode = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) s += char(cp);
    else if (cp < 0x800) { s += char(0xC0 | (cp >> 6)); s += char(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
      s += char(0xE0 | (cp >> 12)); s += char(0x80 | ((cp >> 6) & 0x3F)); s += char(0x80 | (cp & 0x3F));
    } else {
      s += char(0xF0 | (cp >> 18)); s += char(0x80 | ((cp >> 12) & 0x3F));
      s += char(0x80 | ((cp >> 6) & 0x3F)); s += char(0x80 | (cp & 0x3F));
    }
    return s;
  };
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    ASSERT_EQ(IsValidUtf8(encode(cp)), !surrogate) << std::hex << cp;
  }
}

}  // namespace
}  // namespace pg::io
