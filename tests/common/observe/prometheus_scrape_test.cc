// A real Prometheus (Debian's `prometheus` package) scrapes our MetricsServer, and its query API
// returns our counter's value: proof that the exposition format, the endpoint and the names are
// what Prometheus accepts. Skips, visibly, where the binary is not installed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/observe/metrics.h"
#include "tests/common/eventually.h"
#include "tests/common/http_get.h"
#include "tests/common/prometheus_process.h"

namespace rlrun {
namespace {

using Clock = std::chrono::steady_clock;
using testing::find_in_path;
using testing::first_sample;
using testing::PrometheusProcess;

TEST(PrometheusScrape, RealPrometheusReadsOurCounter) {
  const std::string binary = find_in_path("prometheus");
  if (binary.empty()) {
    GTEST_SKIP() << "the `prometheus` binary is not in PATH; install it with "
                    "scripts/install-deps.sh --test (Debian package `prometheus`)";
  }
  Result<std::unique_ptr<MetricsServer>> server = MetricsServer::start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status().message();
  counter_family((*server)->registry(), "scrape_test_tokens_total", "Tokens, for the scrape test")
      .Add({{"worker", "0"}})
      .Increment(42);

  const auto t0 = Clock::now();
  PrometheusProcess prometheus;
  const int port = prometheus.start_on_free_port(binary, {{(*server)->address()}, {}});
  ASSERT_GT(port, 0) << "prometheus did not start:\n" << prometheus.log_text();
  const double ready_seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  std::pair<std::string, std::string> sample;
  testing::eventually([&] {
    if (!prometheus.running()) return true;
    const testing::HttpResponse r = testing::http_get(port, "/api/v1/query?query=rlrun_scrape_test_tokens_total");
    if (r.status == 200) sample = first_sample(r.body);
    return !sample.second.empty();
  }, std::chrono::seconds(20), std::chrono::milliseconds(200));
  ASSERT_TRUE(prometheus.running()) << "prometheus exited:\n" << prometheus.log_text();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_FALSE(sample.second.empty())
      << "no sample of rlrun_scrape_test_tokens_total after " << seconds << " s; prometheus log:\n"
      << prometheus.log_text();
  EXPECT_EQ(sample.second, "42");
  EXPECT_EQ(sample.first, (*server)->address());
  std::printf("prometheus: ready after %.2f s, first queryable sample after %.2f s\n",
              ready_seconds, seconds);
  RecordProperty("first_sample_seconds", std::to_string(seconds));
  const auto t1 = Clock::now();
  prometheus.stop();
  std::printf("prometheus: stopped in %.2f s\n",
              std::chrono::duration<double>(Clock::now() - t1).count());
}

}  // namespace
}  // namespace rlrun
