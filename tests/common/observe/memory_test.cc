#include "common/observe/memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

namespace rlrun {
namespace {

constexpr int64_t kMiB = 1 << 20;

// Makes `bytes` resident, calls `hold` (so a sampler can see it), then gives it back to the
// kernel. mmap, not malloc: glibc may keep freed heap memory resident, which would blur the phases.
void touch(
    int64_t bytes, const std::function<void()>& hold = [] {}) {
  const size_t n = static_cast<size_t>(bytes);
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  for (size_t i = 0; i < n; i += 4096) static_cast<volatile char*>(p)[i] = 1;
  hold();
  ::munmap(p, n);
}

// Waits until the tracker's sampler has taken two more samples (one may have started before the
// memory was touched); nothing to wait for in clear_refs mode. Bounded at 5 s: a loaded machine
// may starve the sampler for a while, which must not fail the test.
std::function<void()> until_sampled(const PeakMemoryTracker& tracker) {
  return [&tracker] {
    if (tracker.mode() != PeakMemoryTracker::Mode::kSampling) return;
    const int64_t target = tracker.samples() + 2;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (tracker.samples() < target && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
}

TEST(ProcessMemory, ParsesProcStatus) {
  const std::string text =
      "Name:\ttest\nVmPeak:\t  9999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1700 kB\nVmSwap:\t 0 kB\n";
  ProcessMemory m = parse_proc_status(text);
  EXPECT_EQ(m.resident_bytes, 1700 * 1024);
  EXPECT_EQ(m.peak_resident_bytes, 2048 * 1024);
  EXPECT_EQ(parse_proc_status("garbage\nVmRSS: x kB").resident_bytes, 0);
  EXPECT_EQ(parse_proc_status("").peak_resident_bytes, 0);
}

TEST(ProcessMemory, PeakGrowsAfterTouchingALargeAllocation) {
  Result<ProcessMemory> before = read_process_memory();
  ASSERT_TRUE(before.ok()) << before.status().message();
  EXPECT_GT(before->resident_bytes, 0);
  EXPECT_GE(before->peak_resident_bytes, before->resident_bytes);
  // Larger than any earlier peak, so the peak must grow whether or not it can be reset.
  const int64_t size = before->peak_resident_bytes + 64 * kMiB;
  touch(size);
  Result<ProcessMemory> after = read_process_memory();
  ASSERT_TRUE(after.ok());
  EXPECT_GE(after->peak_resident_bytes, before->resident_bytes + size - 4 * kMiB);
  EXPECT_LT(after->resident_bytes, after->peak_resident_bytes - size / 2);  // freed again

  // Resetting the kernel's mark keeps the process-lifetime peak.
  if (reset_peak_resident()) {
    Result<ProcessMemory> reset = read_process_memory();
    ASSERT_TRUE(reset.ok());
    EXPECT_GE(reset->peak_resident_bytes, after->peak_resident_bytes);
  }
}

// Phases as a train step runs them: a big transient allocation in forward/backward, a smaller one
// in the optimizer, none in the weight send. Each peak must go to its own phase.
void check_phase_attribution(PeakMemoryTracker& tracker) {
  const auto hold = until_sampled(tracker);
  for (int step = 0; step < 2; ++step) {
    {
      PeakMemoryTracker::ScopedPhase p(tracker, "forward_backward");
      touch(96 * kMiB, hold);
    }
    {
      PeakMemoryTracker::ScopedPhase p(tracker, "optimizer");
      touch(24 * kMiB, hold);
    }
    {
      PeakMemoryTracker::ScopedPhase p(tracker, "weight_send");
      hold();
    }
  }
  std::vector<PeakMemoryTracker::PhasePeak> peaks = tracker.peaks();
  ASSERT_EQ(peaks.size(), 3u);
  EXPECT_EQ(peaks[0].phase, "forward_backward");
  EXPECT_EQ(peaks[1].phase, "optimizer");
  EXPECT_EQ(peaks[2].phase, "weight_send");
  for (const auto& p : peaks) EXPECT_EQ(p.count, 2) << p.phase;
  auto growth = [&](const std::string& phase) {
    for (const auto& p : peaks)
      if (p.phase == phase) return (p.last_peak_bytes - p.start_bytes) / kMiB;
    return int64_t{-1};
  };
  EXPECT_GE(growth("forward_backward"), 92) << tracker.mode_name();
  EXPECT_GE(growth("optimizer"), 20) << tracker.mode_name();
  EXPECT_LT(growth("optimizer"), 60) << tracker.mode_name();  // not the forward/backward peak
  EXPECT_LT(growth("weight_send"), 8) << tracker.mode_name();
  EXPECT_EQ(tracker.peak("forward_backward"), peaks[0].peak_bytes);
  EXPECT_EQ(tracker.peak("never_ran"), 0);
}

TEST(PeakMemoryTracker, AttributesPeaksToPhasesWithClearRefs) {
  PeakMemoryTracker tracker;
  if (tracker.mode() != PeakMemoryTracker::Mode::kClearRefs) {
    GTEST_SKIP()
        << "/proc/self/clear_refs is not writable here; the sampling test covers the fallback";
  }
  check_phase_attribution(tracker);
}

TEST(PeakMemoryTracker, AttributesPeaksToPhasesBySampling) {
  PeakMemoryTracker tracker(/*force_sampling=*/true);
  EXPECT_EQ(tracker.mode(), PeakMemoryTracker::Mode::kSampling);
  check_phase_attribution(tracker);
}

TEST(PeakMemoryTracker, OuterPhaseIncludesItsInnerPhases) {
  PeakMemoryTracker tracker;
  {
    PeakMemoryTracker::ScopedPhase step(tracker, "step");
    {
      PeakMemoryTracker::ScopedPhase fb(tracker, "forward_backward");
      touch(80 * kMiB, until_sampled(tracker));
    }
    PeakMemoryTracker::ScopedPhase opt(tracker, "optimizer");
  }
  EXPECT_GE(tracker.peak("step"), tracker.peak("forward_backward"));
  EXPECT_GE(tracker.peak("forward_backward"), tracker.peaks()[0].start_bytes + 76 * kMiB);
}

TEST(PeakMemoryTracker, ResetsByOthersDoNotHideAPeak) {
  PeakMemoryTracker a, b;
  if (a.mode() != PeakMemoryTracker::Mode::kClearRefs) GTEST_SKIP() << "no clear_refs here";
  a.begin("weight_send");
  touch(64 * kMiB);
  b.begin("other");  // resets the kernel's mark while a's phase is open
  b.end();
  EXPECT_TRUE(reset_peak_resident());  // and so does anyone else
  a.end();
  const auto p = a.peaks().at(0);
  EXPECT_GE(p.peak_bytes - p.start_bytes, 60 * kMiB);
  EXPECT_LT(b.peak("other") - b.peaks().at(0).start_bytes, 8 * kMiB);
}

TEST(PeakMemoryTrackerDeathTest, EndWithoutBeginIsABug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        PeakMemoryTracker tracker;
        tracker.end();
      },
      "without a matching begin");
}

// keep_freed_heap_memory is process-wide, so it runs in a child: a large block freed and
// allocated again comes back without page faults (the heap kept it), where by default glibc maps
// and unmaps such a block and every page faults again.
TEST(KeepFreedHeapMemory, ALargeBlockFreedAndAllocatedAgainFaultsNoPage) {
  auto faults_of_second_allocation = [](bool keep) {
    const pid_t child = ::fork();
    if (child == 0) {
      if (keep) keep_freed_heap_memory();
      constexpr size_t kBytes = 64 * kMiB;
      auto fill = [] {
        char* p = static_cast<char*>(std::malloc(kBytes));
        if (p == nullptr) std::_Exit(100);  // beyond the fault counts
        std::memset(p, 1, kBytes);
        asm volatile("" : : "r"(p) : "memory");  // the compiler may not drop the block as unused
        std::free(p);
      };
      fill();
      rusage before{}, after{};
      ::getrusage(RUSAGE_SELF, &before);
      fill();
      ::getrusage(RUSAGE_SELF, &after);
      std::_Exit(static_cast<int>(std::min<long>(99, after.ru_minflt - before.ru_minflt)));
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  // Exit codes count page faults up to 99: 64 MiB faulting again is >= 32 even in 2 MiB huge pages.
  EXPECT_GE(faults_of_second_allocation(false), 32) << "glibc kept a 64 MiB block by default";
  EXPECT_LE(faults_of_second_allocation(true), 4);
}

}  // namespace
}  // namespace rlrun
