// SSE parsing: events must come out the same however the byte stream is cut.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "bench/sse.h"

namespace pg::bench {
namespace {

std::vector<SseEvent> ParseInPieces(const std::string& stream, const std::vector<size_t>& cuts) {
  SseParser parser;
  std::vector<SseEvent> events;
  size_t pos = 0;
  for (size_t cut : cuts) {
    parser.Feed(std::string_view(stream).substr(pos, cut - pos), &events);
    pos = cut;
  }
  parser.Feed(std::string_view(stream).substr(pos), &events);
  parser.Finish(&events);
  return events;
}

// A stream as llama-server / vLLM send it, with CRLF, comments, multi-line data, an event
// name, an id, a field without a colon, and a final [DONE].
const std::string kStream =
    ": keep-alive\r\n"
    "\r\n"
    "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\r\n"
    "\r\n"
    "event: chunk\n"
    "id: 7\n"
    "data: {\"a\":\n"
    "data:1}\n"
    "\n"
    "retry: 100\r"
    "data:  two spaces\r"
    "\r"
    "data\n"
    "\n"
    "data: [DONE]\n"
    "\n";

void ExpectReference(const std::vector<SseEvent>& events) {
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].data, "{\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}");
  EXPECT_EQ(events[0].event, "");
  EXPECT_EQ(events[1].event, "chunk");
  EXPECT_EQ(events[1].id, "7");
  EXPECT_EQ(events[1].data, "{\"a\":\n1}");  // only one leading space is stripped
  EXPECT_EQ(events[2].data, " two spaces");
  EXPECT_EQ(events[3].data, "");  // "data" with no colon: an empty data line
  EXPECT_EQ(events[4].data, "[DONE]");
}

TEST(SseParser, WholeStream) { ExpectReference(ParseInPieces(kStream, {})); }

TEST(SseParser, EveryByteSeparately) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < kStream.size(); ++i) cuts.push_back(i);
  ExpectReference(ParseInPieces(kStream, cuts));
}

TEST(SseParser, CutBetweenCrAndLf) {
  // Every position right after a '\r': the '\n' arrives in the next piece and must not make
  // an extra empty line (which would dispatch an event early or twice).
  for (size_t i = 0; i < kStream.size(); ++i) {
    if (kStream[i] != '\r') continue;
    SCOPED_TRACE(i);
    ExpectReference(ParseInPieces(kStream, {i + 1}));
  }
}

TEST(SseParser, RandomCuts) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    std::uniform_int_distribution<size_t> num(0, 12), pos(1, kStream.size() - 1);
    std::vector<size_t> cuts(num(rng));
    for (size_t& c : cuts) c = pos(rng);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    ExpectReference(ParseInPieces(kStream, cuts));
  }
}

TEST(SseParser, FinalEventWithoutBlankLine) {
  SseParser parser;
  std::vector<SseEvent> events;
  parser.Feed("data: a\n\ndata: b", &events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(parser.buffered_bytes(), 7u);
  parser.Finish(&events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].data, "b");
}

TEST(SseParser, ByteOrderMarkSplitAcrossPieces) {
  const std::string stream = "\xEF\xBB\xBF" "data: x\n\n";
  for (size_t cut = 1; cut < 5; ++cut) {
    auto events = ParseInPieces(stream, {cut});
    ASSERT_EQ(events.size(), 1u) << cut;
    EXPECT_EQ(events[0].data, "x");
  }
}

TEST(SseParser, EventsWithoutDataAreNotDispatched) {
  auto events = ParseInPieces("event: ping\n\n: comment\n\nid: 3\n\n", {});
  EXPECT_TRUE(events.empty());
}

}  // namespace
}  // namespace pg::bench
