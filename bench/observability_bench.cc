// observability_bench - what instrumentation costs: a ScopedSpan with the timeline off and on
// (one thread and four), a counter increment, a /metrics scrape, and a per-phase memory mark.
// Each figure is printed beside a bound measured in the same run (a steady_clock read). Never
// fails on time.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/observe/memory.h"
#include "common/observe/metrics.h"
#include "common/observe/timeline.h"

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double ns_per_call(int n, F&& f) {
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) f(i);
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
}

}  // namespace

int main() {
  using namespace rlrun;
  const int n = 200000;
  volatile int64_t sink = 0;
  const double clock_ns =
      ns_per_call(n, [&](int) { sink = sink + Clock::now().time_since_epoch().count(); });
  std::printf("steady_clock::now()                    %8.1f ns (the bound)\n", clock_ns);

  Timeline timeline;
  const double off_ns = ns_per_call(n, [&](int i) {
    ScopedSpan s("step", "bench", timeline);
    s.arg("i", i);
  });
  std::printf("ScopedSpan, timeline off               %8.1f ns  (%.2fx a clock read)\n", off_ns,
              off_ns / clock_ns);

  const std::string path = "/tmp/rlrun-observability-bench-" + std::to_string(::getpid()) + ".json";
  if (!timeline.open(path, "bench").ok()) return 1;
  const double on_ns = ns_per_call(n, [&](int i) {
    ScopedSpan s("step", "bench", timeline);
    s.arg("i", i);
  });
  std::printf("ScopedSpan + arg, timeline on          %8.1f ns  (%.1fx)\n", on_ns,
              on_ns / clock_ns);
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < n / 4; ++i) ScopedSpan s("step", "bench", timeline);
    });
  }
  for (auto& t : threads) t.join();
  const double four_ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
  std::printf("ScopedSpan, 4 threads, per span        %8.1f ns  (%.1fx)\n", four_ns,
              four_ns / clock_ns);
  timeline.close();
  std::printf("timeline file: %.1f MB for %d spans\n", std::filesystem::file_size(path) / 1e6,
              2 * n);
  const auto m0 = Clock::now();
  if (!merge_timelines({path}, path + ".merged").ok()) return 1;
  std::printf("merge_timelines of that file           %8.2f s\n",
              std::chrono::duration<double>(Clock::now() - m0).count());
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".merged");

  prometheus::Registry registry;
  auto& counter = counter_family(registry, "bench_total", "bench").Add({{"worker", "0"}});
  const double inc_ns = ns_per_call(n, [&](int) { counter.Increment(); });
  std::printf("prometheus Counter::Increment          %8.1f ns  (%.1fx)\n", inc_ns,
              inc_ns / clock_ns);
  auto& family = gauge_family(registry, "bench_gauge", "bench");
  for (int w = 0; w < 256; ++w) family.Add({{"worker", std::to_string(w)}}).Set(w);
  const double scrape_us =
      ns_per_call(200, [&](int) { sink = sink + serialize_metrics(registry).size(); }) / 1e3;
  std::printf("serialize 258 series (a /metrics body) %8.1f us\n", scrape_us);

  PeakMemoryTracker tracker;
  const double phase_us =
      ns_per_call(2000, [&](int) { PeakMemoryTracker::ScopedPhase p(tracker, "x"); }) / 1e3;
  std::printf("PeakMemoryTracker phase (%s)    %8.1f us\n", tracker.mode_name(), phase_us);
  return 0;
}
