// `rlrun CONFIG` watched the way users watch it: this test reads /metrics every 100 ms and a real
// Prometheus scrapes it every second, from before the workers register, through the format
// warm-start and the RL steps, to the end. The run must finish cleanly. (A scrape once killed the
// orchestrator: civetweb's 100 KiB thread stacks minus ~80 KiB of static TLS; common/observe/thread_stack.h.)
// The run starts in a working directory other than the repository: the config's paths are its own.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/http_get.h"
#include "tests/common/prometheus_process.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun::orchestrator {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// The value of an unlabelled sample `name` in a Prometheus text exposition, or -1.
double sample_value(const std::string& exposition, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = exposition.find(key);
  return at == std::string::npos ? -1 : std::atof(exposition.c_str() + at + key.size());
}

// The value of the first sample of an instant query, or -1 when there is none (yet).
double prometheus_value(int port, const std::string& query) {
  const testing::HttpResponse r = testing::http_get(port, "/api/v1/query?query=" + query);
  if (r.status != 200) return -1;
  const std::string value = testing::first_sample(r.body).second;
  return value.empty() ? -1 : std::atof(value.c_str());
}

TEST(RunScrape, ScrapedEveryTenthOfASecondTheRunFinishesCleanly) {
  testing::TempDir dir;
  const int port = testing::pick_free_port();
  ASSERT_GT(port, 0);

  // A real Prometheus first, already scraping the port when the run starts (its first scrape
  // comes a few seconds after it is ready).
  testing::PrometheusProcess prometheus;
  int prometheus_port = 0;
  const std::string prometheus_binary = testing::find_in_path("prometheus");
  if (prometheus_binary.empty()) {
    std::printf("prometheus not in PATH (scripts/install-deps.sh --test installs it): this test scrapes alone\n");
  } else {
    prometheus_port = testing::pick_free_port();
    ASSERT_TRUE(prometheus.start(prometheus_binary, prometheus_port, "127.0.0.1:" + std::to_string(port)));
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (prometheus_value(prometheus_port, "up") < 0 && Clock::now() < deadline) {
      ASSERT_TRUE(prometheus.running()) << "prometheus exited:\n" << prometheus.log_text();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ASSERT_GE(prometheus_value(prometheus_port, "up"), 0) << "prometheus never scraped:\n" << prometheus.log_text();
  }

  const std::string log = dir.path() + "/rlrun.log", run = dir.path() + "/run";
  const pid_t pid = testing::spawn_in(dir.path(),
                             {RLRUN_BINARY, std::string(RLRUN_SOURCE_DIR) + "/configs/quickstart.yaml", "--run-dir", run,
                              "--set", "metrics_bind=127.0.0.1:" + std::to_string(port), "--set",
                              "format_warm_start_steps=60", "--set", "number_of_steps=30", "--set", "task.eval_every=10",
                              // learning is not the point here: every step forms its batch
                              "--set", "discard_group_zero_advantage=false"},
                             log);
  ASSERT_GT(pid, 0);

  int ok = 0, failed_after_first = 0, in_warm_start = 0, in_rl_steps = 0, status = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(300);
  bool exited = false;
  while (!exited && Clock::now() < deadline) {
    const testing::HttpResponse r = testing::http_get(port, "/metrics");
    if (r.status == 200) {
      ++ok;
      const double step = sample_value(r.body, "rlrun_trainer_step");
      in_warm_start += step == 0;
      in_rl_steps += step >= 1;
    } else if (ok > 0) {
      ++failed_after_first;  // the server went away: the run ended, or the orchestrator died
    }
    exited = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  const std::string output = testing::read_all(log);
  ASSERT_TRUE(exited) << "the run did not end within 300 s:\n" << output;
  ASSERT_FALSE(WIFSIGNALED(status)) << "the orchestrator was killed by signal " << WTERMSIG(status) << " after "
                                    << ok << " scrapes:\n" << output;
  ASSERT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_GE(in_warm_start, 3) << "scrapes before the first RL step (registration, warm-start)";
  EXPECT_GE(in_rl_steps, 3) << "scrapes during the RL steps";
  EXPECT_LE(failed_after_first, 2) << "a failed scrape is allowed only as the run shuts its server down";
  const json summary = json::parse(testing::read_all(run + "/summary.json"));
  EXPECT_EQ(summary["exit"], "ok");
  EXPECT_EQ(summary["steps_completed"], 30);
  std::printf("%d scrapes answered (%d before the first RL step, %d during them)\n", ok, in_warm_start, in_rl_steps);

  if (prometheus_port > 0) {
    ASSERT_TRUE(prometheus.running()) << prometheus.log_text();
    const double up = prometheus_value(prometheus_port, "sum_over_time(up%5B10m%5D)");
    const double last_step = prometheus_value(prometheus_port, "max_over_time(rlrun_trainer_step%5B10m%5D)");
    std::printf("prometheus: %g successful scrapes, last step seen %g\n", up, last_step);
    EXPECT_GE(up, 3) << prometheus.log_text();
    EXPECT_GE(last_step, 1) << "prometheus saw no RL step";
  }
}

// A metrics server whose HTTP threads cannot start on a usable address costs the run its
// /metrics and nothing else. Debian's civetweb is built without IPv6, so `[::1]:0` is such an
// address here (a build with IPv6 serves it, and there is nothing to test).
TEST(RunScrape, AMetricsServerThatCannotStartCostsOnlyTheMetrics) {
  testing::TempDir dir;
  const std::string run = dir.path() + "/run";
  const testing::CliRun r = testing::run_rlrun(
      dir, str("'", RLRUN_SOURCE_DIR, "/configs/quickstart.yaml' --run-dir '", run,
               "' --set 'metrics_bind=\"[::1]:0\"' --set format_warm_start_steps=20 --set number_of_steps=3 ",
               "--set discard_group_zero_advantage=false --set task.eval_size=8"));
  if (r.err.find("metrics on http://[::1]") != std::string::npos) GTEST_SKIP() << "this civetweb serves IPv6";
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("the HTTP server (civetweb) failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the run goes on without /metrics"), std::string::npos) << r.err;
  const json summary = json::parse(testing::read_all(run + "/summary.json"));
  EXPECT_EQ(summary["exit"], "ok");
  EXPECT_EQ(summary["steps_completed"], 3);
}

}  // namespace
}  // namespace rlrun::orchestrator
