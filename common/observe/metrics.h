// metrics.h - Prometheus metrics: the `/metrics` endpoint and the helpers that name metrics.
//
// Every rlrun metric is named `rlrun_<what>[_<unit>][_total]` (Prometheus conventions: base units,
// seconds and bytes; counters end in `_total`). The family helpers below add the `rlrun_` prefix
// when it is missing, so no metric escapes it. Metric and label names are code constants: an
// invalid one is a bug and fails an RLRUN_CHECK, never a Status.
//
// A MetricsServer serves one Registry (plus any on-demand collectables) over HTTP at
// http://<metrics_bind>/metrics, via prometheus-cpp's Exposer (civetweb, 2 threads).
// Lifetimes: families and metrics returned by the helpers live as long as their Registry; the
// server keeps the registry and the collectables alive while it lives; destroying it stops serving
// (in ~50 ms: the destructor wakes civetweb's 2 s listener poll) and frees the port.
// Thread-safety: prometheus-cpp counters, gauges, histograms and registries are thread-safe.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace prometheus {
class Exposer;
}

namespace rlrun {

class PeakMemoryTracker;

inline constexpr std::string_view kMetricPrefix = "rlrun_";

// "trainer_idle_seconds_total" -> "rlrun_trainer_idle_seconds_total"; a name already prefixed is
// kept. RLRUN_CHECK-fails on a name that is not a valid Prometheus metric name.
std::string metric_name(std::string_view name);

// Families registered in `registry` under metric_name(name). Registering the same name and type
// again returns the existing family (same const labels) so components may share a name; a name
// already used by another type is a bug (RLRUN_CHECK). Add a labelled child with
// `family.Add({{"worker", "3"}})` (histograms: `family.Add(labels, buckets)`).
prometheus::Family<prometheus::Counter>& counter_family(
    prometheus::Registry& registry, std::string_view name, const std::string& help,
    const prometheus::Labels& const_labels = {});
prometheus::Family<prometheus::Gauge>& gauge_family(prometheus::Registry& registry,
                                                    std::string_view name, const std::string& help,
                                                    const prometheus::Labels& const_labels = {});
prometheus::Family<prometheus::Histogram>& histogram_family(
    prometheus::Registry& registry, std::string_view name, const std::string& help,
    const prometheus::Labels& const_labels = {});

// {start, start*factor, ..., start*factor^(count-1)}: histogram bucket upper bounds.
prometheus::Histogram::BucketBoundaries exponential_buckets(double start, double factor, int count);

// Adds the seconds it lives (steady clock) to a counter and/or observes them in a histogram, at
// destruction. Idle time as a counter (rlrun_trainer_idle_seconds_total) lets rate() give the
// idle fraction; a histogram per phase gives step time by phase. Either pointer may be null.
class ScopedSeconds {
 public:
  explicit ScopedSeconds(prometheus::Counter* counter, prometheus::Histogram* histogram = nullptr)
      : counter_(counter), histogram_(histogram), start_(std::chrono::steady_clock::now()) {}
  ~ScopedSeconds() {
    const double s = elapsed();
    if (counter_) counter_->Increment(s);
    if (histogram_) histogram_->Observe(s);
  }
  ScopedSeconds(const ScopedSeconds&) = delete;
  ScopedSeconds& operator=(const ScopedSeconds&) = delete;

  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  prometheus::Counter* counter_;
  prometheus::Histogram* histogram_;
  std::chrono::steady_clock::time_point start_;
};

// A collectable whose families are computed on every scrape by `collect` (called on a civetweb
// thread: it must be thread-safe and quick).
class CallbackCollectable : public prometheus::Collectable {
 public:
  explicit CallbackCollectable(std::function<std::vector<prometheus::MetricFamily>()> collect)
      : collect_(std::move(collect)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return collect_(); }

 private:
  std::function<std::vector<prometheus::MetricFamily>()> collect_;
};

// One gauge sample for a family built on demand.
struct GaugeSample {
  prometheus::Labels labels;
  double value = 0;
};
// A gauge family named metric_name(name), for CallbackCollectable.
prometheus::MetricFamily gauge_snapshot(std::string_view name, const std::string& help,
                                        const std::vector<GaugeSample>& samples);

// Gauges read from /proc/self/status on every scrape, labelled {process="<process>"}:
//   rlrun_process_resident_bytes, rlrun_process_peak_resident_bytes (see memory.h for what they
//   measure), and with a tracker rlrun_phase_peak_resident_bytes{process, phase}.
std::shared_ptr<prometheus::Collectable> process_memory_collectable(
    std::string process, std::shared_ptr<const PeakMemoryTracker> tracker = nullptr);

// The Prometheus text exposition of `collectable` (what GET /metrics returns for it).
std::string serialize_metrics(const prometheus::Collectable& collectable);

// Splits "host:port" (IPv4 address, or [IPv6] in brackets; port 0-65535, 0 = the kernel chooses).
// Errors name the config key `metrics_bind`.
Status parse_metrics_bind(const std::string& bind, std::string* host, int* port);

// The same for any listen address; errors name `key` (e.g. "--bind").
Status parse_listen_address(std::string_view key, const std::string& bind, std::string* host, int* port);

// Why listening on host:port fails, found by binding it ourselves (civetweb only says that it
// failed), e.g. "Address already in use (another process, ...)"; "" when the bind works.
std::string listen_failure_cause(const std::string& host, int port);

// civetweb's listener thread polls with a 2 s timeout and looks at its stop flag only between
// polls, so stopping it idle takes ~2 s; a connection to host:port (0.0.0.0 and :: mean loopback)
// wakes the poll at once. Call it repeatedly while mg_stop runs.
void poke_listener(const std::string& host, int port);

// True for an address only this machine can reach: 127.0.0.0/8 or ::1 (as parse_metrics_bind
// returns it, without brackets).
bool is_loopback_address(const std::string& host);

class MetricsServer {
 public:
  // Listens on `bind` ("127.0.0.1:9400"; port 0 lets the kernel choose: see port()). Serves
  // `registry`, or a new one when null. A port in use or a bad address gives a Status
  // (kInvalidArgument or kUnavailable) that names `metrics_bind`, the address, the cause and what
  // to do; an HTTP server that fails on a usable address (its threads cannot start) gives
  // kInternal, which a caller may survive by running without /metrics. A non-loopback address is allowed (a
  // Prometheus on another node) but logged as a warning: /metrics has no authentication.
  static Result<std::unique_ptr<MetricsServer>> start(
      const std::string& bind, std::shared_ptr<prometheus::Registry> registry = nullptr);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }  // the port actually listened on
  const std::string& host() const { return host_; }
  std::string address() const;  // "127.0.0.1:40123"
  std::string url() const;      // "http://127.0.0.1:40123/metrics"

  prometheus::Registry& registry() { return *registry_; }
  const std::shared_ptr<prometheus::Registry>& shared_registry() const { return registry_; }

  // Scraped on every GET /metrics from now on, kept alive by the server. Call from the thread that
  // owns the server (registries and metrics themselves are thread-safe; this list is not).
  void add_collectable(std::shared_ptr<prometheus::Collectable> collectable);

 private:
  MetricsServer() = default;

  std::string host_;
  int port_ = 0;
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::unique_ptr<prometheus::Exposer> exposer_;  // last: stops serving before the rest goes
};

}  // namespace rlrun
