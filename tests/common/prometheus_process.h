// prometheus_process.h - a real Prometheus (Debian's `prometheus` package) as a child process of a
// test, scraping its targets and evaluating its rule files every second, and readers of its HTTP
// query API.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/common/eventually.h"
#include "tests/common/http_get.h"

extern char** environ;

namespace rlrun::testing {

namespace prometheus_fs = std::filesystem;

inline std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = dir + "/" + name;
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct PrometheusOptions {
  std::vector<std::string> targets;     // host:port of each /metrics endpoint (one job, `rlrun`)
  std::vector<std::string> rule_files;  // absolute paths; rules are evaluated every second
};

// A Prometheus child process and its temporary directory; both gone when this goes.
class PrometheusProcess {
 public:
  PrometheusProcess() {
    char tmpl[] = "/tmp/rlrun-prometheus-test-XXXXXX";
    if (::mkdtemp(tmpl)) dir_ = tmpl;
  }
  ~PrometheusProcess() {
    stop();
    if (!dir_.empty()) prometheus_fs::remove_all(dir_);
  }

  // Starts `binary` on 127.0.0.1:port scraping `target` every second.
  bool start(const std::string& binary, int port, const std::string& target) {
    return start(binary, port, PrometheusOptions{{target}, {}});
  }

  bool start(const std::string& binary, int port, const PrometheusOptions& options) {
    if (dir_.empty()) return false;
    std::ofstream config(dir_ / "prometheus.yml");
    config << "global:\n"
              "  scrape_interval: 1s\n"
              "  scrape_timeout: 1s\n"
              "  evaluation_interval: 1s\n";
    if (!options.rule_files.empty()) {
      config << "rule_files:\n";
      for (const std::string& f : options.rule_files) config << "  - '" << f << "'\n";
    }
    config << "scrape_configs:\n"
              "  - job_name: rlrun\n"
              "    static_configs:\n"
              "      - targets: [";
    for (size_t i = 0; i < options.targets.size(); ++i) config << (i ? ", '" : "'") << options.targets[i] << "'";
    config << "]\n";
    config.close();
    const std::vector<std::string> args = {
        binary, "--config.file=" + (dir_ / "prometheus.yml").string(),
        "--storage.tsdb.path=" + (dir_ / "data").string(),
        "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"};
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
    for (int i = 0; i < 100 && running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (running()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  // Starts it on a free port and waits until it is ready; returns the port, or 0 (see log_text()).
  // A port taken between our check and Prometheus's bind makes it exit at once: then another.
  int start_on_free_port(const std::string& binary, const PrometheusOptions& options) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      const int port = pick_free_port();
      if (port <= 0 || !start(binary, port, options)) return 0;
      const bool ready = eventually([&] { return !running() || http_get(port, "/-/ready").status == 200; },
                                    std::chrono::seconds(20), std::chrono::milliseconds(50));
      if (running()) return ready ? port : 0;
    }
    return 0;
  }

  // Where the config, the data and the log live; a test may put its rule files here.
  const prometheus_fs::path& dir() const { return dir_; }
  std::string log_path() const { return (dir_ / "prometheus.log").string(); }
  std::string log_text() const {
    std::ifstream in(log_path());
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  prometheus_fs::path dir_;
  pid_t pid_ = -1;
};

// The first sample of an instant-vector query reply, as {instance, value}; empty if none yet.
inline std::pair<std::string, std::string> first_sample(const std::string& body) {
  nlohmann::json reply = nlohmann::json::parse(body, nullptr, false);
  if (!reply.is_object() || reply.value("status", "") != "success") return {};
  const nlohmann::json& result = reply["data"]["result"];
  if (!result.is_array() || result.empty()) return {};
  return {result[0]["metric"].value("instance", ""), result[0]["value"][1].get<std::string>()};
}

// The reply of GET /api/v1/query?query=<expr> as JSON (null when there is no parsable reply).
// A reply has "status" ("success" or "error", with "error" saying why) and data.result.
inline nlohmann::json prometheus_query(int port, const std::string& expr) {
  const HttpResponse r = http_get(port, "/api/v1/query?query=" + url_encode(expr));
  return r.status == 0 ? nlohmann::json() : nlohmann::json::parse(r.body, nullptr, false);
}

}  // namespace rlrun::testing
