// `rlrun report RUN_DIR` end to end: the real binary on a hand-written run folder
// (report_test_run.h) writes one self-contained page with every chart and series, escapes what
// the run wrote, counts the malformed lines it skipped, and refuses a folder that is no run with
// a message naming it. (Rendering in a real browser: report_browser_test.cc.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "tests/orchestrator/cli/report_test_run.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using rlrun::testing::CliRun;
using rlrun::testing::read_all;
using rlrun::testing::ReportTestRun;
using rlrun::testing::run_rlrun;
using rlrun::testing::TempDir;

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// Nothing on the page makes a browser fetch: no script, stylesheet link, import, url() or
// src/href to another place.
void expect_self_contained(const std::string& html) {
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("<link")));
  EXPECT_THAT(html, Not(HasSubstr("@import")));
  EXPECT_THAT(html, Not(HasSubstr("url(")));
  EXPECT_FALSE(std::regex_search(html, std::regex(R"((src|href)\s*=\s*["']?\s*(https?:)?//)", std::regex::icase)));
  EXPECT_EQ(count(html, "<svg"), count(html, "</svg>"));
}

TEST(ReportCli, WritesOneSelfContainedPageWithEveryChartAndEscapesTheRun) {
  TempDir dir;
  testing::write_report_test_run(dir);
  const CliRun r = run_rlrun(dir, str("report '", dir.path(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string page_path = dir.path() + "/report.html";
  ASSERT_TRUE(fs::exists(page_path)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("wrote " + page_path));
  EXPECT_THAT(r.err, HasSubstr("metrics.jsonl: skipped 1 malformed line(s); the first: line 4: not JSON"));
  EXPECT_THAT(r.err, HasSubstr("samples.jsonl: skipped 1 malformed line(s); the first: line 3: no string \"prompt\""));
  const std::string html = read_all(page_path);
  expect_self_contained(html);

  EXPECT_EQ(count(html, "<svg class=\"chart\""), ReportTestRun::kSvgCharts);
  EXPECT_EQ(count(html, "<g class=\"series\""), ReportTestRun::kSeries);
  EXPECT_EQ(count(html, "<rect class=\"bar\""), ReportTestRun::kBars);
  for (const char* series : {"reward mean per step", "term exact", "term format", "length", "held-out accuracy",
                             "trainer idle per step", "generated", "trained", "wait for a batch", "train",
                             "weight sync"}) {
    EXPECT_THAT(html, HasSubstr(str("data-series=\"", series, "\""))) << series;
  }
  // Held-out accuracy: before RL at step 0, evaluations at steps 3 and 6 (after RL replaces 6).
  EXPECT_EQ(count(html, "<title>held-out accuracy at step"), 3);

  // What the run wrote is text, never markup.
  EXPECT_THAT(html, HasSubstr("&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt; reverse abc:"));
  EXPECT_THAT(html, Not(HasSubstr(ReportTestRun::kInjection)));
  EXPECT_THAT(html, HasSubstr("# run &lt;b&gt;config&lt;/b&gt; &amp; more"));

  // Malformed lines are counted on the page.
  EXPECT_THAT(html, HasSubstr("6 lines read, <b>1 malformed line skipped</b>"));    // metrics.jsonl
  EXPECT_THAT(html, HasSubstr("10 lines read, <b>1 malformed line skipped</b>"));   // samples.jsonl

  // Summary tables: the headline figures, formatted by their keys' units.
  EXPECT_THAT(html, HasSubstr("5.0% &rarr; 75.0%"));  // held-out accuracy before -> after
  EXPECT_THAT(html, HasSubstr("42.0%"));              // trainer idle
  EXPECT_THAT(html, HasSubstr("exact + 0.1 * format"));
  EXPECT_THAT(html, HasSubstr("51.05 MiB"));

  // Samples: groups by step and kind, at most 5 each (step 6's eval has 7).
  EXPECT_EQ(count(html, "<h3>step "), ReportTestRun::kSampleGroups);
  EXPECT_EQ(count(html, "<td><pre>cba</pre></td><td><pre>cba</pre></td>"), ReportTestRun::kSamplesShown);
  EXPECT_THAT(html, HasSubstr("reverse q4:"));
  EXPECT_THAT(html, Not(HasSubstr("reverse q5:")));
}

TEST(ReportCli, WritesWhereToldAndSaysWhatAPartialFolderLacks) {
  TempDir dir;
  testing::write_report_test_run(dir);
  fs::remove(dir.path() + "/metrics.jsonl");
  fs::remove(dir.path() + "/samples.jsonl");
  fs::remove(dir.path() + "/config.yaml");
  const std::string out = dir.path() + "/elsewhere/page.html";
  fs::create_directories(dir.path() + "/elsewhere");
  const CliRun r = run_rlrun(dir, str("report '", dir.path(), "' -o '", out, "'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir.path() + "/report.html"));
  const std::string html = read_all(out);
  expect_self_contained(html);
  EXPECT_EQ(count(html, "<svg class=\"chart\""), ReportTestRun::kSvgCharts - 1);  // no reward server logs
  EXPECT_THAT(html, HasSubstr(">no data</text>"));  // per-step charts without metrics.jsonl
  EXPECT_THAT(html, HasSubstr("has no samples.jsonl"));
  EXPECT_THAT(html, HasSubstr("No config.yaml"));
  EXPECT_EQ(count(html, "<title>held-out accuracy at step"), 2);  // before and after, from summary.json
}

TEST(ReportCli, ALongRunStaysSmall) {
  TempDir dir;
  std::string metrics;
  for (int step = 1; step <= 5000; ++step) {
    metrics += str("{\"step\":", step, ",\"reward_mean\":", (step % 17) / 17.0, ",\"wait_seconds\":0.1,",
                   "\"train_seconds\":0.2,\"weight_sync_seconds\":0.01,\"tokens_trained\":900,",
                   "\"tokens_generated_total\":", 1500 * step, "}\n");
  }
  dir.write("metrics.jsonl", metrics);
  const CliRun r = run_rlrun(dir, str("report '", dir.path(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto size = fs::file_size(dir.path() + "/report.html");
  EXPECT_LT(size, 400u * 1024) << "5000 steps should be drawn from bucket means";
  EXPECT_THAT(read_all(dir.path() + "/report.html"), HasSubstr("mean of last 200 steps"));
}

// Numbers a hand-edited or foreign file may hold: a range finer than the values' precision
// (ticks 5 apart on 1e17, whose doubles are 16 apart), the largest doubles, negative steps,
// keys of the wrong type. The page is written, quickly.
TEST(ReportCli, ExtremeNumbersNeitherHangNorCrash) {
  TempDir dir;
  dir.write("metrics.jsonl",
            "{\"step\":-3,\"reward_mean\":1e17,\"wait_seconds\":1e308,\"train_seconds\":1e308}\n"
            "{\"step\":1,\"reward_mean\":100000000000000016,\"wait_seconds\":\"soon\",\"tokens_trained\":-5}\n"
            "{\"step\":2,\"weight_sync_seconds\":-1e308,\"reward_terms\":[1,2],\"eval_accuracy\":7}\n"
            "{\"step\":9223372036854775807,\"reward_mean\":1e17}\n");
  dir.write("summary.json", "{\"peak_memory_bytes\": {\"trainer-0\": -1, \"rollout-0\": \"big\"}, \"eval\": 3}\n");
  const CliRun r = run_rlrun(dir, str("report '", dir.path(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_self_contained(read_all(dir.path() + "/report.html"));
}

TEST(ReportCli, AFolderThatIsNoRunIsAClearErrorNamingIt) {
  TempDir dir;
  CliRun r = run_rlrun(dir, str("report '", dir.path(), "/nope'"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("rlrun report: run folder `" + dir.path() + "/nope` does not exist"));

  fs::create_directories(dir.path() + "/empty");
  r = run_rlrun(dir, str("report '", dir.path(), "/empty'"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("`" + dir.path() + "/empty` is not a run folder"));
  EXPECT_THAT(r.err, HasSubstr("metrics.jsonl: missing; summary.json: missing"));
  EXPECT_FALSE(fs::exists(dir.path() + "/empty/report.html"));

  dir.write("garbage/metrics.jsonl", "not json\n[1, 2]\n");
  dir.write("garbage/summary.json", "{\"steps_completed\": ");
  r = run_rlrun(dir, str("report '", dir.path(), "/garbage'"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("metrics.jsonl: nothing usable (line 1: not JSON"));
  EXPECT_THAT(r.err, HasSubstr("summary.json: nothing usable (not JSON"));

  r = run_rlrun(dir, "report");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("missing RUN_DIR"));
  r = run_rlrun(dir, str("report '", dir.path(), "' --set seed=1"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("takes no --set"));
}

TEST(ReportCli, HelpSaysWhatThePageHolds) {
  TempDir dir;
  const CliRun r = run_rlrun(dir, "report --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("usage: rlrun report RUN_DIR [-o FILE]"));
  EXPECT_THAT(r.out, HasSubstr("self-contained"));
}

}  // namespace
}  // namespace rlrun
