// run/samples/dispatch_count.h - how many samples a run has dispatched, kept on disk so that
// `rlrun CONFIG --resume` accounts for the samples of an orchestrator that was killed (SIGKILL:
// it wrote nothing more) after its last checkpoint (run/training/state.h: samples_at_resume).
//
// The file <run_dir>/dispatched_samples holds one fixed-width line, the count over the whole run
// (every process of it, the first and each resumed one), rewritten in place after every group
// is admitted: one pwrite, no fsync. The kernel keeps what a killed process wrote, so only a
// machine crash (power loss, kernel panic) can lose the latest counts; a reader then sees an
// older count or none. Threads: the orchestrator's loop only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace rlrun::orchestrator {

// "<run_dir>/dispatched_samples"
std::string dispatch_count_path(const std::string& run_dir);

class DispatchCount {
 public:
  DispatchCount() = default;  // not open: add() only counts
  ~DispatchCount();
  DispatchCount(const DispatchCount&) = delete;
  DispatchCount& operator=(const DispatchCount&) = delete;

  // Creates or rewrites `path` with `total` (the run's count so far). An error names the path.
  Status open(const std::string& path, int64_t total);
  // Adds n and rewrites the file. After a failed write it warns once (naming the path and what a
  // SIGKILL would then miss) and only counts.
  void add(int64_t n);
  int64_t total() const { return total_; }

  // The count in `path`; nullopt when there is no such file (a run of an older rlrun). An error
  // (naming the path) when it is not a count this rlrun writes (a torn write after a machine crash).
  static Result<std::optional<int64_t>> read(const std::string& path);

 private:
  Status write();

  std::string path_;
  int fd_ = -1;
  int64_t total_ = 0;
};

}  // namespace rlrun::orchestrator
