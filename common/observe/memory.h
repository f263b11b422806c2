// memory.h - resident memory of this process, and its peak per named phase.
//
// What is measured: host (CPU) resident set size of the whole process, in bytes, as Linux reports
// it in /proc/self/status: VmRSS (resident now: anonymous + file-backed + shared-memory pages
// mapped by this process) and VmHWM (the high-water mark of VmRSS). Every thread's allocations
// count; memory that was allocated but never touched does not (it is not resident); device (GPU)
// memory is not included: backends report their own. The kernel keeps these counters per CPU (per
// thread before Linux 6.2) and sums them approximately, so a value can be off by a few hundred KiB.
//
// Per-phase peaks: writing "5" to /proc/self/clear_refs resets VmHWM to the current VmRSS (Linux
// >= 4.0), so the VmHWM read at the end of a phase is exactly that phase's peak. Where the write is
// not permitted (some containers, old kernels), a sampler thread reads VmRSS every few milliseconds
// instead: peaks shorter than the sampling interval may then be missed (mode() says which).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace rlrun {

struct ProcessMemory {
  int64_t resident_bytes = 0;  // VmRSS
  // Process-lifetime peak: max(VmHWM, every VmHWM seen before a reset_peak_resident()).
  int64_t peak_resident_bytes = 0;
};

// Reads /proc/self/status. Fails (io_error) where /proc is not mounted.
Result<ProcessMemory> read_process_memory();

// Parses the text of a /proc/<pid>/status file (exposed for tests). Values missing from the text
// are reported as 0.
ProcessMemory parse_proc_status(const std::string& text);

// Resets the kernel's VmHWM to the current VmRSS, first folding the old VmHWM into the
// process-lifetime peak that read_process_memory() reports and into the open phases of every
// PeakMemoryTracker. Returns false where not permitted.
bool reset_peak_resident();

// For a worker computing on the CPU: glibc serves every block from its heap (no mmap per large
// block) and never returns freed memory to the system, so a training step's activations (GBs,
// freed at its end) are not zero-filled by page faults again at the next step. Resident memory
// then stays near the process's peak between steps. SmolLM2's trainer, forward + backward at one
// thread: 11.5-11.8 s -> 9.7-10.5 s per step (12.0-12.4 -> 10.5-11.2 CPU s); peaks +1% (trainer)
// and +5% (rollout worker). Call before the large allocations begin; process-wide.
void keep_freed_heap_memory();

// Records the peak resident memory of named phases ("forward_backward", "optimizer",
// "weight_send"). A phase may repeat: its peak is the max over all its occurrences. Phases may
// nest: an outer phase's peak includes its inner phases. Thread-safety: begin/end/ScopedPhase from
// one thread (the one running the phases); peaks() and peak() from any thread.
class PeakMemoryTracker {
 public:
  enum class Mode { kClearRefs, kSampling };
  struct PhasePeak {
    std::string phase;
    int64_t peak_bytes = 0;       // max resident bytes seen during the phase, over all occurrences
    int64_t last_peak_bytes = 0;  // peak of the latest occurrence
    int64_t start_bytes = 0;      // resident bytes when the latest occurrence began
    int64_t count = 0;            // occurrences completed
  };

  // force_sampling: use the sampler even where clear_refs works (tests, comparison).
  explicit PeakMemoryTracker(
      bool force_sampling = false,
      std::chrono::milliseconds sample_interval = std::chrono::milliseconds(2));
  ~PeakMemoryTracker();
  PeakMemoryTracker(const PeakMemoryTracker&) = delete;
  PeakMemoryTracker& operator=(const PeakMemoryTracker&) = delete;

  Mode mode() const { return mode_; }
  const char* mode_name() const;

  void begin(const std::string& phase);
  void end();  // ends the innermost open phase; RLRUN_CHECK-fails if none is open

  // Samples the sampler has taken so far (0 in clear_refs mode): diagnostics and tests.
  int64_t samples() const;

  // Completed phases, in order of first completion.
  std::vector<PhasePeak> peaks() const;
  // Peak of a completed phase, 0 if it never completed.
  int64_t peak(const std::string& phase) const;

  class ScopedPhase {
   public:
    ScopedPhase(PeakMemoryTracker& tracker, const std::string& phase) : tracker_(tracker) {
      tracker_.begin(phase);
    }
    ~ScopedPhase() { tracker_.end(); }
    ScopedPhase(const ScopedPhase&) = delete;
    ScopedPhase& operator=(const ScopedPhase&) = delete;

   private:
    PeakMemoryTracker& tracker_;
  };

 private:
  friend bool reset_peak_resident();  // folds VmHWM into open phases before each reset

  struct Open {
    std::string phase;
    int64_t start_bytes = 0;
    int64_t running_peak = 0;
    int64_t hwm_at_start = 0;  // sampling mode: VmHWM when the phase began
  };
  void fold_locked(const ProcessMemory& now);
  void sampler_loop();

  Mode mode_;
  std::chrono::milliseconds sample_interval_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::vector<Open> open_;
  std::vector<PhasePeak> done_;
  int64_t samples_ = 0;
  std::thread sampler_;
};

}  // namespace rlrun
