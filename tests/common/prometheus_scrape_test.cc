// A real Prometheus (Debian's `prometheus` package) scrapes our MetricsServer, and its query API
// returns our counter's value: proof that the exposition format, the endpoint and the names are
// what Prometheus accepts. Skips, visibly, where the binary is not installed.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/metrics.h"
#include "tests/common/http_get.h"

extern char** environ;

namespace rlrun {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = dir + "/" + name;
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// A Prometheus child process and its temporary directory; both gone when this goes.
class PrometheusProcess {
 public:
  PrometheusProcess() {
    char tmpl[] = "/tmp/rlrun-prometheus-test-XXXXXX";
    if (::mkdtemp(tmpl)) dir_ = tmpl;
  }
  ~PrometheusProcess() {
    stop();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Starts `binary` on 127.0.0.1:port scraping `target` every second.
  bool start(const std::string& binary, int port, const std::string& target) {
    if (dir_.empty()) return false;
    std::ofstream(dir_ / "prometheus.yml") << "global:\n"
                                              "  scrape_interval: 1s\n"
                                              "  scrape_timeout: 1s\n"
                                              "scrape_configs:\n"
                                              "  - job_name: rlrun\n"
                                              "    static_configs:\n"
                                              "      - targets: ['" << target << "']\n";
    const std::vector<std::string> args = {
        binary,
        "--config.file=" + (dir_ / "prometheus.yml").string(),
        "--storage.tsdb.path=" + (dir_ / "data").string(),
        "--web.listen-address=127.0.0.1:" + std::to_string(port),
        "--log.level=warn"};
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = log_path();
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = ::posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) pid_ = -1;
    return rc == 0;
  }

  bool running() {
    if (pid_ <= 0) return false;
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) pid_ = -1;
    return pid_ > 0;
  }

  // SIGTERM, then SIGKILL after 5 s.
  void stop() {
    if (!running()) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 100 && running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (running()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  std::string log_path() const { return (dir_ / "prometheus.log").string(); }
  std::string log_text() const {
    std::ifstream in(log_path());
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  fs::path dir_;
  pid_t pid_ = -1;
};

// The first sample of an instant-vector query reply, as {instance, value}; empty if none yet.
std::pair<std::string, std::string> first_sample(const std::string& body) {
  nlohmann::json reply = nlohmann::json::parse(body, nullptr, false);
  if (!reply.is_object() || reply.value("status", "") != "success") return {};
  const nlohmann::json& result = reply["data"]["result"];
  if (!result.is_array() || result.empty()) return {};
  return {result[0]["metric"].value("instance", ""), result[0]["value"][1].get<std::string>()};
}

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
  const int port = testing::pick_free_port();
  ASSERT_GT(port, 0);
  ASSERT_TRUE(prometheus.start(binary, port, (*server)->address()));

  std::pair<std::string, std::string> sample;
  const auto deadline = t0 + std::chrono::seconds(20);
  while (Clock::now() < deadline && sample.second.empty()) {
    ASSERT_TRUE(prometheus.running()) << "prometheus exited:\n" << prometheus.log_text();
    testing::HttpResponse r =
        testing::http_get(port, "/api/v1/query?query=rlrun_scrape_test_tokens_total");
    if (r.status == 200) sample = first_sample(r.body);
    if (sample.second.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_FALSE(sample.second.empty()) << "no sample of rlrun_scrape_test_tokens_total after "
                                      << seconds << " s; prometheus log:\n" << prometheus.log_text();
  EXPECT_EQ(sample.second, "42");
  EXPECT_EQ(sample.first, (*server)->address());
  std::printf("prometheus: start to first queryable sample %.2f s\n", seconds);
  RecordProperty("first_sample_seconds", std::to_string(seconds));
  const auto t1 = Clock::now();
  prometheus.stop();
  std::printf("prometheus: stopped in %.2f s\n", std::chrono::duration<double>(Clock::now() - t1).count());
}

}  // namespace
}  // namespace rlrun
