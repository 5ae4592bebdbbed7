// UTF-8 and byte-level helpers against hand-derived expectations (Unicode Table 3-7 and the
// "maximal subpart" replacement examples of Unicode ch. 3 / WHATWG).
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "tokenizer/unicode.h"

namespace pg::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(ByteLevel, MapIsGpt2sBijection) {
  const auto& map = ByteToCodepoint();
  EXPECT_EQ(map[' '], 0x120u);   // 'Ġ'
  EXPECT_EQ(map['\n'], 0x10Au);  // 'Ċ'
  EXPECT_EQ(map['!'], uint32_t('!'));
  EXPECT_EQ(map[0xAD], 0x143u);  // soft hyphen is the last of the 68 remapped bytes
  EXPECT_EQ(map[0xA1], 0xA1u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(CodepointToByte(map[b]), b);
  EXPECT_EQ(CodepointToByte(' '), -1);
  EXPECT_EQ(CodepointToByte(0x144), -1);
}

TEST(ByteLevel, RoundTripsRandomBytes) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes(rng() % 37, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const std::string spelled = BytesToByteLevel(bytes);
    EXPECT_TRUE(IsValidUtf8(spelled));
    std::string back;
    ASSERT_TRUE(ByteLevelToBytes(spelled, &back));
    EXPECT_EQ(back, bytes);
  }
  std::string out;
  EXPECT_FALSE(ByteLevelToBytes("a b", &out));  // a plain space is not in the alphabet
  EXPECT_TRUE(ByteLevelToBytes("\xC4\xA0the", &out));  // "Ġthe"
  EXPECT_EQ(out, " the");
}

TEST(Utf8, ValidityFollowsTable37) {
  EXPECT_TRUE(IsValidUtf8("plain \xC3\xA9 \xE6\x97\xA5 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\xAF"));      // overlong 3-byte
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xE6\x97"));          // truncated
  EXPECT_EQ(FirstInvalidUtf8("ab\xFF"), 2u);
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  auto lossy = [](std::string_view s) {
    std::string out;
    AppendUtf8Lossy(&out, s);
    return out;
  };
  EXPECT_EQ(lossy("abc"), "abc");
  EXPECT_EQ(lossy("a\xE6\x97"), "a" + kFffd);               // one subpart, one U+FFFD
  EXPECT_EQ(lossy("\xE6\x97\xE6\x97\xA5"), kFffd + "\xE6\x97\xA5");
  EXPECT_EQ(lossy("\xC0\xAF"), kFffd + kFffd);               // C0 is never a lead
  EXPECT_EQ(lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);   // ED A0: A0 out of range
  EXPECT_EQ(lossy("\xF0\x9F\x98"), kFffd);
  EXPECT_EQ(lossy("\x80\x80"), kFffd + kFffd);
}

TEST(Utf8, IncompleteTailHoldsOnlyUnfinishedSequences) {
  EXPECT_EQ(IncompleteUtf8Tail("abc"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("ab\xE6"), 1u);
  EXPECT_EQ(IncompleteUtf8Tail("ab\xE6\x97"), 2u);
  EXPECT_EQ(IncompleteUtf8Tail("ab\xE6\x97\xA5"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteUtf8Tail("\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xFF"), 0u);      // invalid, not pending
  EXPECT_EQ(IncompleteUtf8Tail("a\xED\xA0"), 0u);  // already ill-formed
  EXPECT_EQ(IncompleteUtf8Tail("\x80"), 0u);
}

}  // namespace
}  // namespace pg::tokenizer
