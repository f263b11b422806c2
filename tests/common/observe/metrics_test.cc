#include "common/observe/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "common/config/config.h"
#include "common/observe/log.h"
#include "common/observe/memory.h"
#include "tests/common/http_get.h"

namespace rlrun {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// One server shared by the tests that only need a running endpoint.
MetricsServer& shared_server() {
  static std::unique_ptr<MetricsServer> server = [] {
    Result<std::unique_ptr<MetricsServer>> s = MetricsServer::start("127.0.0.1:0");
    EXPECT_TRUE(s.ok()) << s.status().message();
    return std::move(s).value();
  }();
  return *server;
}

// The value of the sample line `series` ("rlrun_x_total{a=\"b\"}") in an exposition text, or NaN.
double sample_value(const std::string& text, const std::string& series) {
  for (size_t at = text.find(series); at != std::string::npos; at = text.find(series, at + 1)) {
    if ((at == 0 || text[at - 1] == '\n') && text[at + series.size()] == ' ') {
      return std::stod(text.substr(at + series.size() + 1));
    }
  }
  return std::nan("");
}

TEST(MetricName, AddsThePrefixOnce) {
  EXPECT_EQ(metric_name("trainer_idle_seconds_total"), "rlrun_trainer_idle_seconds_total");
  EXPECT_EQ(metric_name("rlrun_queue_depth"), "rlrun_queue_depth");
}

TEST(MetricNameDeathTest, RejectsInvalidNames) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(metric_name("bad-name"), "invalid metric name `rlrun_bad-name`");
  EXPECT_DEATH(metric_name("rlrun_"), "invalid metric name");
}

TEST(MetricFamilies, RegisterUnderPrefixAndSerialize) {
  prometheus::Registry registry;
  auto& discards = counter_family(registry, "discarded_samples_total", "Discarded samples");
  discards.Add({{"reason", "stale"}}).Increment(3);
  discards.Add({{"reason", "zero_advantage"}}).Increment();
  // The same name again is the same family: components may share one.
  EXPECT_EQ(&counter_family(registry, "rlrun_discarded_samples_total", "Discarded samples"),
            &discards);
  gauge_family(registry, "async_level", "Inference step minus trainer step minus 1").Add({}).Set(2);
  auto& hist = histogram_family(registry, "step_seconds", "Step time")
                   .Add({{"phase", "optimizer"}}, exponential_buckets(0.001, 10, 4));
  hist.Observe(0.05);
  hist.Observe(5);

  const std::string text = serialize_metrics(registry);
  EXPECT_EQ(sample_value(text, "rlrun_discarded_samples_total{reason=\"stale\"}"), 3);
  EXPECT_EQ(sample_value(text, "rlrun_discarded_samples_total{reason=\"zero_advantage\"}"), 1);
  EXPECT_EQ(sample_value(text, "rlrun_async_level"), 2);
  EXPECT_EQ(sample_value(text, "rlrun_step_seconds_bucket{phase=\"optimizer\",le=\"0.01\"}"), 0);
  EXPECT_EQ(sample_value(text, "rlrun_step_seconds_bucket{phase=\"optimizer\",le=\"0.1\"}"), 1);
  EXPECT_EQ(sample_value(text, "rlrun_step_seconds_bucket{phase=\"optimizer\",le=\"+Inf\"}"), 2);
  EXPECT_EQ(sample_value(text, "rlrun_step_seconds_count{phase=\"optimizer\"}"), 2);
  EXPECT_THAT(text, HasSubstr("# TYPE rlrun_discarded_samples_total counter"));
}

TEST(ScopedSeconds, AddsItsLifetimeToACounterAndAHistogram) {
  prometheus::Registry registry;
  auto& idle = counter_family(registry, "trainer_idle_seconds_total", "Idle").Add({});
  auto& step = histogram_family(registry, "step_seconds", "Step")
                   .Add({{"phase", "wait"}}, exponential_buckets(0.001, 10, 4));
  const auto t0 = std::chrono::steady_clock::now();
  {
    ScopedSeconds wait(&idle, &step);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  const double outer = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  { ScopedSeconds counter_only(&idle); }
  EXPECT_GE(idle.Value(), 0.030);
  EXPECT_LE(idle.Value(), outer + 0.001);
  const std::string text = serialize_metrics(registry);
  EXPECT_EQ(sample_value(text, "rlrun_step_seconds_count{phase=\"wait\"}"), 1);
  EXPECT_EQ(sample_value(text, "rlrun_step_seconds_bucket{phase=\"wait\",le=\"0.01\"}"), 0);
  EXPECT_GE(sample_value(text, "rlrun_step_seconds_sum{phase=\"wait\"}"), 0.030);
}

TEST(MetricFamiliesDeathTest, NameUsedByAnotherTypeIsABug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  prometheus::Registry registry;
  counter_family(registry, "tokens_total", "Tokens");
  EXPECT_DEATH(gauge_family(registry, "tokens_total", "Tokens"),
               "cannot register rlrun_tokens_total");
}

TEST(MetricsServer, ServesCountersOverHttp) {
  MetricsServer& server = shared_server();
  ASSERT_GT(server.port(), 0);
  EXPECT_EQ(server.address(), "127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(server.url(), "http://127.0.0.1:" + std::to_string(server.port()) + "/metrics");
  auto& tokens =
      counter_family(server.registry(), "http_test_tokens_total", "Tokens").Add({{"worker", "3"}});
  tokens.Increment(2.5);
  tokens.Increment(5);

  testing::HttpResponse r = testing::http_get(server.port(), "/metrics");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(sample_value(r.body, "rlrun_http_test_tokens_total{worker=\"3\"}"), 7.5) << r.body;

  tokens.Increment(1);  // a scrape sees the value of its moment
  r = testing::http_get(server.port(), "/metrics");
  EXPECT_EQ(sample_value(r.body, "rlrun_http_test_tokens_total{worker=\"3\"}"), 8.5) << r.body;
}

TEST(MetricsServer, DefaultBindIsLoopbackOnly) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(parse_metrics_bind(Config{}.metrics_bind, &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_TRUE(is_loopback_address(host));
  EXPECT_TRUE(is_loopback_address("127.3.2.1"));
  EXPECT_TRUE(is_loopback_address("::1"));
  for (const char* open : {"0.0.0.0", "10.1.2.3", "::", "128.0.0.1", "not an address"})
    EXPECT_FALSE(is_loopback_address(open)) << open;
}

TEST(MetricsServer, NonLoopbackBindIsServedWithAWarning) {
  ::testing::internal::CaptureStderr();
  auto open = MetricsServer::start("0.0.0.0:0");
  const std::string warned = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(open.ok()) << open.status().message();
  EXPECT_NE(warned.find("metrics_bind 0.0.0.0:0 is not a loopback address"), std::string::npos) << warned;
  ::testing::internal::CaptureStderr();
  auto local = MetricsServer::start("127.0.0.1:0");
  const std::string quiet = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(local.ok()) << local.status().message();
  EXPECT_EQ(quiet.find("loopback"), std::string::npos) << quiet;
}

TEST(MetricsServer, ProcessMemoryGaugesAreReadOnEachScrape) {
  MetricsServer& server = shared_server();
  auto tracker = std::make_shared<PeakMemoryTracker>();
  tracker->begin("weight_send");
  tracker->end();
  server.add_collectable(process_memory_collectable("metrics-test", tracker));

  testing::HttpResponse r = testing::http_get(server.port(), "/metrics");
  ASSERT_EQ(r.status, 200);
  const double rss = sample_value(r.body, "rlrun_process_resident_bytes{process=\"metrics-test\"}");
  const double peak =
      sample_value(r.body, "rlrun_process_peak_resident_bytes{process=\"metrics-test\"}");
  EXPECT_GT(rss, 1 << 20) << r.body;  // a running gtest binary is well over 1 MiB
  EXPECT_GE(peak, rss);
  EXPECT_GT(sample_value(
                r.body,
                "rlrun_phase_peak_resident_bytes{phase=\"weight_send\",process=\"metrics-test\"}"),
            0)
      << r.body;
}

TEST(MetricsServer, PortInUseNamesTheKeyAndTheAddress) {
  MetricsServer& first = shared_server();
  Result<std::unique_ptr<MetricsServer>> second = MetricsServer::start(first.address());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  const std::string& m = second.status().message();
  EXPECT_THAT(m, StartsWith("metrics_bind: cannot listen on " + first.address()));
  EXPECT_THAT(m, HasSubstr("Address already in use")) << m;
  EXPECT_THAT(m, HasSubstr("set metrics_bind to a free address, e.g. 127.0.0.1:0"));
}

TEST(MetricsServer, StopsPromptlyAndFreesThePort) {
  for (const std::string host : {"127.0.0.1", "0.0.0.0"}) {
    Result<std::unique_ptr<MetricsServer>> s = MetricsServer::start(host + ":0");
    ASSERT_TRUE(s.ok()) << s.status().message();
    const int port = (*s)->port();
    ASSERT_EQ(testing::http_get(port, "/metrics").status, 200) << host;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // listener idle in its poll
    const auto t0 = std::chrono::steady_clock::now();
    s = Result<std::unique_ptr<MetricsServer>>(nullptr);
    const double stop_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // civetweb alone takes ~2 s (its listener poll); the destructor wakes it.
    EXPECT_LT(stop_seconds, 1.5) << host;
    std::printf("metrics server on %s stopped in %.3f s\n", host.c_str(), stop_seconds);
    EXPECT_EQ(testing::http_get(port, "/metrics").status, 0) << "still serving after destruction";
    Result<std::unique_ptr<MetricsServer>> again = MetricsServer::start(str(host, ":", port));
    EXPECT_TRUE(again.ok()) << again.status().message();
  }
}

TEST(MetricsServer, BadBindAddressIsAnInvalidArgument) {
  for (const char* bind : {"", "9400", "127.0.0.1", "127.0.0.1:", "127.0.0.1:70000",
                           "127.0.0.1:94x", "localhost:9400", "[::1:9400", "999.1.1.1:9400"}) {
    Result<std::unique_ptr<MetricsServer>> s = MetricsServer::start(bind);
    ASSERT_FALSE(s.ok()) << bind;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << bind;
    EXPECT_THAT(s.status().message(), StartsWith(str("metrics_bind: `", bind, "` is not a valid")));
  }
  std::string host;
  int port = -1;
  ASSERT_TRUE(parse_metrics_bind("[::1]:0", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 0);
  ASSERT_TRUE(parse_metrics_bind("0.0.0.0:9400", &host, &port).ok());
  EXPECT_EQ(port, 9400);
}

TEST(MetricsServer, AddressNotOnThisMachineSaysSo) {
  // 192.0.2.0/24 is TEST-NET-1: never assigned to a local interface.
  Result<std::unique_ptr<MetricsServer>> s = MetricsServer::start("192.0.2.1:0");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("metrics_bind: cannot listen on 192.0.2.1:0"));
  EXPECT_THAT(s.status().message(), HasSubstr("no interface of this machine has that address"));
}

}  // namespace
}  // namespace rlrun
