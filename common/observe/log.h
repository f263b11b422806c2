// log.h - one line per event on stderr: "[rlrun 12:34:56.789 I orchestrator] message".
// Thread-safe (one write(2) per line). The process name is set once at start-up by main().
#pragma once

#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "common/clock.h"

namespace rlrun::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_process_name(std::string name);  // "orchestrator", "trainer-0", "rollout-1", ...
void set_min_level(Level level);
void write(Level level, std::string_view message);

// Every line from now on is also appended to `path` (the run's logs/orchestrator.log), as are
// status lines; an empty path stops it. Errors are returned, and the log goes on without the file.
// Past `rotate_bytes` (0: never; log_files_max_mb) the file is renamed <path>.1, replacing an
// older one, and a new one begun: a long run keeps at most about twice that on disk.
bool set_file(const std::string& path, int64_t rotate_bytes = 0);

// A progress line ("step 12/50  ETA 4m ..."). On a terminal it is one line at the bottom of the
// screen, redrawn in place, which other lines scroll above; elsewhere (a pipe, a file) it is an
// ordinary info line, written at most once per `plain_interval` unless `force` (the last one).
// It always goes to the set_file() copy.
void status(std::string_view line, bool force = false,
            std::chrono::steady_clock::duration plain_interval = std::chrono::seconds(30));
// The status line stops being redrawn (a terminal keeps its last state on a line of its own).
void end_status();

inline void debug(std::string_view m) { write(Level::kDebug, m); }
inline void info(std::string_view m) { write(Level::kInfo, m); }
inline void warn(std::string_view m) { write(Level::kWarn, m); }
inline void error(std::string_view m) { write(Level::kError, m); }

// A message that recurs (per group, per step): written the first time, then at most once per
// `interval`, saying how often it came in between, by the clock `now`. Not thread-safe: one owner
// calls it.
class RateLimited {
 public:
  explicit RateLimited(std::chrono::steady_clock::duration interval, SteadyNow now = std::chrono::steady_clock::now)
      : interval_(interval), now_(std::move(now)) {}
  // Writes `message` (plus " [N more like this in the last S s]") or counts it as held back.
  void write(Level level, std::string_view message);
  int64_t held_back() const { return held_back_; }  // since the last line written

 private:
  std::chrono::steady_clock::duration interval_;
  SteadyNow now_;
  std::chrono::steady_clock::time_point last_written_{};
  bool written_ = false;
  int64_t held_back_ = 0;
};

}  // namespace rlrun::log

namespace rlrun {

// str("step ", 3, " loss ", 0.5) -> "step 3 loss 0.5": the one way to build a message.
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace rlrun
