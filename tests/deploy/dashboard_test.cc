// The Grafana dashboard and the Prometheus rules in deploy/, against a real run: `rlrun` runs the
// quickstart on this machine, Debian's Prometheus scrapes its /metrics every second (the
// orchestrator's endpoint serves every process's metrics: trainer ranks and rollout workers
// report theirs in heartbeats) with the rules loaded, and every query of every panel of the
// dashboard JSON, read from the file, must return data through the HTTP API, as must every
// recording rule; then an alert must fire. Skips, visibly, where `prometheus` is not installed.
//
// The alert is made to fire on purpose, and this is how: the run is synchronous
// (max_async_rollout 0), so the rollout worker waits for every train step and weight sync (about
// 3/4 of the time on this machine), and Prometheus loads a copy of the rules in which time runs
// 60 times faster (minutes become seconds: `for: 10m` is 10 s, rate(...[5m]) is a 5 s rate; a
// window is at least 4 s so rate() sees two scrapes). The thresholds are the real ones:
// RlrunRolloutIdle fires because rollout idles more than half of the time.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/common/eventually.h"
#include "tests/common/http_get.h"
#include "tests/common/prometheus_process.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun::deploy {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

const std::string kDashboard = std::string(RLRUN_SOURCE_DIR) + "/deploy/grafana/rlrun-dashboard.json";
const std::string kRules = std::string(RLRUN_SOURCE_DIR) + "/deploy/prometheus/rlrun-rules.yml";

struct PanelQuery {
  std::string panel;  // its title, for messages
  std::string expr;
};

// Every target's PromQL of every panel, the panels inside rows included. Checks on the way what
// an import needs: unique panel ids, and every panel and target on the `datasource` variable.
void collect_queries(const json& panels, std::vector<PanelQuery>& out, std::set<int>& ids, int& panel_count) {
  for (const json& p : panels) {
    const std::string title = p.value("title", "?");
    EXPECT_TRUE(ids.insert(p.value("id", -1)).second) << "panel id " << p.value("id", -1) << " twice (" << title << ")";
    EXPECT_TRUE(p.contains("gridPos")) << title;
    if (p.contains("panels")) collect_queries(p["panels"], out, ids, panel_count);
    if (p.value("type", "") == "row") continue;
    ++panel_count;
    EXPECT_EQ(p["datasource"].value("uid", ""), "${datasource}") << title;
    for (const json& t : p.value("targets", json::array())) {
      EXPECT_EQ(t["datasource"].value("uid", ""), "${datasource}") << title;
      out.push_back({title, t.value("expr", "")});
    }
  }
}

// A value inside `=~"..."` as Grafana's Prometheus data source writes it: regex metacharacters
// escaped with a backslash, itself escaped for the PromQL string.
std::string grafana_regex_escape(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) out += "\\\\";
    out += c;
  }
  return out;
}

// What Grafana puts in place of the dashboard's variables for a user who picked `instance`:
// $__rate_interval is max($__interval + scrape interval, 4 x scrape interval), 4s for a data
// source whose scrape interval is set to this Prometheus's 1 s.
std::string substitute(std::string expr, const std::string& instance) {
  expr = std::regex_replace(expr, std::regex(R"(\$\{?__rate_interval\}?)"), "4s");
  expr = std::regex_replace(expr, std::regex(R"(\$\{?instance\}?)"), grafana_regex_escape(instance));
  return expr;
}

// The rules with time running 60x faster: `for: Nm` becomes Ns, a range [Nm] or `offset Nm`
// becomes max(N, 4) s. Thresholds stay.
std::string compress_time(const std::string& rules) {
  const std::regex duration(R"((for: |\[|offset )(\d+)m\b)");
  std::string out;
  size_t last = 0;
  for (auto it = std::sregex_iterator(rules.begin(), rules.end(), duration); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const int n = std::stoi(m[2].str());
    out += rules.substr(last, m.position(0) - last);
    out += m[1].str() + std::to_string(m[1].str() == "for: " ? n : std::max(n, 4)) + "s";
    last = m.position(0) + m.length(0);
  }
  return out + rules.substr(last);
}

// True when a query reply has at least one sample with a finite value (NaN and Inf are what
// Grafana draws as gaps). `error` gets Prometheus's message when the query itself is wrong.
bool has_finite_sample(const json& reply, std::string& error) {
  if (!reply.is_object()) return false;
  if (reply.value("status", "") != "success") {
    error = reply.value("errorType", "") + ": " + reply.value("error", "");
    return false;
  }
  for (const json& r : reply["data"]["result"]) {
    const std::string v = r["value"][1].get<std::string>();
    if (std::isfinite(std::strtod(v.c_str(), nullptr))) return true;
  }
  return false;
}

std::set<std::string> firing_alerts(int port) {
  std::set<std::string> names;
  const testing::HttpResponse r = testing::http_get(port, "/api/v1/alerts");
  const json reply = json::parse(r.body, nullptr, false);
  if (r.status != 200 || !reply.is_object()) return names;
  for (const json& a : reply["data"]["alerts"]) {
    if (a.value("state", "") == "firing") names.insert(a["labels"].value("alertname", ""));
  }
  return names;
}

// The dashboard file as Grafana imports it: panels and their queries, on a Prometheus data
// source variable, and the `instance` variable's metric (its query is label_values(METRIC, instance)).
struct Dashboard {
  std::vector<PanelQuery> queries;
  int panels = 0;
  std::string instance_query, instance_metric;
};

Dashboard read_dashboard() {
  Dashboard d;
  const json dashboard = json::parse(testing::read_all(kDashboard), nullptr, false);
  if (!dashboard.is_object()) return ADD_FAILURE() << kDashboard << " is not JSON", d;
  EXPECT_GE(dashboard.value("schemaVersion", 0), 39);
  std::set<int> ids;
  collect_queries(dashboard["panels"], d.queries, ids, d.panels);
  bool datasource_variable = false;
  for (const json& v : dashboard["templating"]["list"]) {
    datasource_variable |= v.value("type", "") == "datasource" && v.value("query", "") == "prometheus";
    if (v.value("name", "") == "instance") d.instance_query = v.value("definition", "");
  }
  EXPECT_TRUE(datasource_variable) << "no `datasource` variable of type prometheus";
  std::smatch m;
  if (std::regex_match(d.instance_query, m, std::regex(R"(label_values\((\w+), *instance\))"))) d.instance_metric = m[1];
  EXPECT_FALSE(d.instance_metric.empty()) << "the `instance` variable's query: " << d.instance_query;
  for (const PanelQuery& q : d.queries) EXPECT_FALSE(q.expr.empty()) << "a target without expr in " << q.panel;
  return d;
}

std::vector<std::string> recording_rules(const std::string& rules) {
  std::vector<std::string> names;
  const std::regex record(R"(- record: (\S+))");
  for (auto it = std::sregex_iterator(rules.begin(), rules.end(), record); it != std::sregex_iterator(); ++it)
    names.push_back((*it)[1].str());
  return names;
}

// The quickstart, synchronous (see the top), started now and stopped (SIGTERM, SIGKILL after
// 60 s) when this goes.
class QuickstartRun {
 public:
  QuickstartRun(const testing::TempDir& dir, const std::string& metrics_bind) : log_(dir.path() + "/rlrun.log") {
    pid_ = testing::spawn_in(
        dir.path(),
        {RLRUN_BINARY, std::string(RLRUN_SOURCE_DIR) + "/configs/quickstart.yaml", "--run-dir", dir.path() + "/run",
         "--set", "metrics_bind=" + metrics_bind, "--set", "format_warm_start_steps=20",
         // far more steps than the test waits for: it stops the run when it has seen everything
         "--set", "number_of_steps=1000", "--set", "max_async_rollout=0", "--set", "task.eval_every=5", "--set",
         "task.eval_size=8",
         // learning is not the point here: every step forms its batch
         "--set", "discard_group_zero_advantage=false"},
        log_);
  }
  ~QuickstartRun() { EXPECT_TRUE(stop()) << "the run did not stop within 60 s of SIGTERM:\n" << output(); }

  bool started() const { return pid_ > 0; }
  bool exited() {
    if (pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == pid_) pid_ = -1;
    return pid_ <= 0;
  }
  bool stop() {
    if (exited()) return true;
    ::kill(pid_, SIGTERM);
    if (testing::eventually([&] { return exited(); }, std::chrono::seconds(60), std::chrono::milliseconds(50)))
      return true;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return false;
  }
  std::string output() const { return testing::read_all(log_); }

 private:
  std::string log_;
  pid_t pid_ = -1;
};

// What Prometheus has answered so far.
struct Observed {
  std::map<std::string, std::string> pending;  // PromQL without a finite sample yet -> who asks it
  std::vector<std::string> errors;              // queries Prometheus rejected, with its message
  std::set<std::string> firing, instances;      // alerts seen firing; the `instance` variable's values
};

// Asks each pending query once, the alerts, and the `instance` variable's values.
void look(int port, const std::string& instance_metric, Observed& o) {
  for (auto it = o.pending.begin(); it != o.pending.end();) {
    std::string error;
    if (has_finite_sample(testing::prometheus_query(port, it->first), error)) {
      it = o.pending.erase(it);
      continue;
    }
    if (!error.empty()) o.errors.push_back(it->second + ": " + it->first + ": " + error);
    ++it;
  }
  for (const std::string& a : firing_alerts(port)) o.firing.insert(a);
  if (o.instances.empty()) {
    const testing::HttpResponse r =
        testing::http_get(port, "/api/v1/label/instance/values?match%5B%5D=" + testing::url_encode(instance_metric));
    const json reply = json::parse(r.body, nullptr, false);
    if (reply.is_object() && reply["data"].is_array()) o.instances = reply["data"].get<std::set<std::string>>();
  }
}

TEST(Dashboard, EveryPanelQueryReturnsDataAndAnAlertFiresOnARealRun) {
  const auto t0 = Clock::now();
  const Dashboard dashboard = read_dashboard();
  ASSERT_GE(dashboard.queries.size(), 20u);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::string rules = testing::read_all(kRules);
  const std::vector<std::string> records = recording_rules(rules);
  ASSERT_GE(records.size(), 4u);
  const std::string binary = testing::find_in_path("prometheus");
  if (binary.empty()) {
    GTEST_SKIP() << "the `prometheus` binary is not in PATH; install it with scripts/install-deps.sh --test "
                    "(Debian package `prometheus`)";
  }

  testing::TempDir dir;
  const int metrics_port = testing::pick_free_port();
  ASSERT_GT(metrics_port, 0);
  const std::string instance = "127.0.0.1:" + std::to_string(metrics_port);
  testing::PrometheusProcess prometheus;
  const std::string rules_copy = (prometheus.dir() / "rlrun-rules-60x.yml").string();
  std::ofstream(rules_copy) << compress_time(rules);
  ASSERT_EQ(testing::read_all(rules_copy).find("m]"), std::string::npos) << testing::read_all(rules_copy);
  const int port = prometheus.start_on_free_port(binary, {{instance}, {rules_copy}});
  ASSERT_GT(port, 0) << "prometheus did not start:\n" << prometheus.log_text();

  // Each query is asked until it has a finite sample: a rate() needs two scrapes, a step-time
  // mean a step inside its window. A query Prometheus rejects stops the wait at once.
  Observed o;
  for (const PanelQuery& q : dashboard.queries) o.pending[substitute(q.expr, instance)] = q.panel;
  for (const std::string& r : records) o.pending[r] = "recording rule " + r;
  for (const auto& [expr, panel] : o.pending)
    ASSERT_EQ(expr.find('$'), std::string::npos) << "a variable this test does not know, in " << panel << ": " << expr;
  const size_t distinct = o.pending.size();
  const std::string wanted_alert = "RlrunRolloutIdle";
  QuickstartRun run(dir, instance);
  ASSERT_TRUE(run.started());
  testing::eventually(
      [&] {
        look(port, dashboard.instance_metric, o);
        return run.exited() || !o.errors.empty() ||
               (o.pending.empty() && !o.instances.empty() && o.firing.count(wanted_alert));
      },
      std::chrono::seconds(90), std::chrono::milliseconds(500));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_FALSE(run.exited()) << "the run ended before the checks:\n" << run.output();

  for (const std::string& e : o.errors) ADD_FAILURE() << "Prometheus rejects the query of " << e;
  ASSERT_TRUE(o.errors.empty()) << "(the wait stopped at the first rejected query)";
  for (const auto& [expr, panel] : o.pending) ADD_FAILURE() << "no data after " << seconds << " s for " << panel << ": " << expr;
  EXPECT_EQ(o.instances, std::set<std::string>{instance}) << "the `instance` variable's " << dashboard.instance_query;
  EXPECT_TRUE(o.firing.count(wanted_alert)) << wanted_alert << " never fired; prometheus log:\n" << prometheus.log_text();
  std::string fired;
  for (const std::string& a : o.firing) fired += " " + a;
  std::printf("%d panels, %zu queries; %zu of %zu distinct queries (recording rules included) returned data "
              "within %.1f s; firing:%s\n",
              dashboard.panels, dashboard.queries.size(), distinct - o.pending.size(), distinct, seconds, fired.c_str());
}

}  // namespace
}  // namespace rlrun::deploy
