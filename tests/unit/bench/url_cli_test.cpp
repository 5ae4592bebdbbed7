// URL parsing, CLI presets versus explicit flags, and the progress line.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "bench/agentic.h"
#include "bench/http_client.h"
#include "bench/progress.h"
#include "core/status.h"

namespace pg::bench {
namespace {

TEST(ParseUrl, Forms) {
  Url u = ParseUrl("http://10.1.2.3:8080");
  EXPECT_EQ(u.host, "10.1.2.3");
  EXPECT_EQ(u.port, "8080");
  EXPECT_EQ(u.base_path, "");
  u = ParseUrl("http://localhost:8000/v1/");
  EXPECT_EQ(u.host, "localhost");
  EXPECT_EQ(u.base_path, "");
  u = ParseUrl("http://gw/proxy/v1");
  EXPECT_EQ(u.port, "80");
  EXPECT_EQ(u.base_path, "/proxy");
  u = ParseUrl("http://[::1]:9000");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, "9000");
}

TEST(ParseUrl, Rejects) {
  for (const char* bad : {"https://x:1", "ftp://x", "localhost:8000", "http://", "http://h:port",
                          "http://[::1:80"}) {
    EXPECT_THROW(ParseUrl(bad), Error) << bad;
  }
}

AgenticConfig ParseArgs(std::vector<std::string> args) {
  CLI::App app;
  AgenticConfig seen;
  bool ran = false;
  AddAgenticCommand(app, [&](const AgenticConfig& c) {
    seen = c;
    ran = true;
  });
  args.insert(args.begin(), "agentic");
  std::reverse(args.begin(), args.end());  // CLI11 takes a reversed vector
  app.parse(args);
  EXPECT_TRUE(ran);
  return seen;
}

TEST(AgenticCli, DefaultsAreTheIssueDefaults) {
  AgenticConfig c = ParseArgs({"--url", "http://h:1"});
  EXPECT_EQ(c.url, "http://h:1");
  EXPECT_EQ(c.first_turn_tokens, 50000);
  EXPECT_EQ(c.turn_growth_tokens, 800);
  EXPECT_EQ(c.min_turns, 10);
  EXPECT_EQ(c.max_turns, 15);
  EXPECT_EQ(c.max_tokens, 500);
  EXPECT_EQ(c.concurrency, (std::vector<int>{1, 2, 4, 8, 16}));
  EXPECT_EQ(c.conversations, (std::vector<int>{4, 8, 8, 16, 32}));
  EXPECT_TRUE(c.ignore_eos);
  EXPECT_TRUE(c.dataset_path.empty());
}

TEST(AgenticCli, PresetThenExplicitFlagsWin) {
  AgenticConfig c = ParseArgs({"--preset", "cpu", "--max-tokens", "17", "--concurrency", "1,3",
                               "--conversations", "5,6", "--no-ignore-eos", "--no-progress"});
  EXPECT_EQ(c.preset, "cpu");
  EXPECT_EQ(c.first_turn_tokens, 1500);  // from the preset
  EXPECT_EQ(c.turn_growth_tokens, 120);
  EXPECT_EQ(c.min_turns, 3);
  EXPECT_EQ(c.max_turns, 5);
  EXPECT_EQ(c.max_tokens, 17);  // explicit
  EXPECT_EQ(c.concurrency, (std::vector<int>{1, 3}));
  EXPECT_EQ(c.conversations, (std::vector<int>{5, 6}));
  EXPECT_FALSE(c.ignore_eos);
  EXPECT_FALSE(c.progress);
}

TEST(AgenticCli, BadInputs) {
  EXPECT_THROW(ParseArgs({"--preset", "gpu9000"}), CLI::ValidationError);
  EXPECT_THROW(ParseArgs({"--synthetic", "--dataset", "x.json"}), Error);
  AgenticConfig c;
  EXPECT_THROW(ApplyPreset("nope", &c), Error);
}

TEST(Progress, RendersCounts) {
  ProgressBar bar(/*enabled=*/false);
  bar.Start("c=4", 40);
  bar.Advance(7);
  bar.Advance(3, 1);
  const std::string line = bar.Render(20);
  EXPECT_NE(line.find("10/40 turns"), std::string::npos) << line;
  EXPECT_NE(line.find("1 failed"), std::string::npos) << line;
  EXPECT_NE(line.find("[#####...............]"), std::string::npos) << line;  // 10/40 of 20
}

TEST(Report, TableHasOneRowPerLevel) {
  LevelSummary a, b;
  a.concurrency = 1;
  a.kv_hit_rate = 0.5;
  b.concurrency = 16;
  const std::string table = FormatTable({a, b});
  // Two header lines + two rows.
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 4);
  EXPECT_NE(table.find("0.500"), std::string::npos);
  EXPECT_NE(table.find("n/a"), std::string::npos);
}

}  // namespace
}  // namespace pg::bench
