// clock.h - the time arithmetic every component needs, in one place.
//
// Durations in the config and the protocol are seconds as double; waits are std::chrono. Steady
// time (monotonic) measures intervals; Unix time (system clock) is only for records a person reads
// (summary.json's failure times).
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>

namespace rlrun {

// Where a part reads steady time: the real clock by default; a test passes a fake one that it
// advances by hand, so that a rule about intervals is tested without waiting them out.
using SteadyNow = std::function<std::chrono::steady_clock::time_point()>;

// Seconds from `start` (steady clock) to now.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A config or protocol duration in seconds as a wait, truncated to whole milliseconds.
inline std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

// Seconds since the Unix epoch (system clock), for records, never for intervals.
inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// CPU seconds this process has used, all threads together (CLOCK_PROCESS_CPUTIME_ID): the work a
// step did, whatever else shared the cores meanwhile.
inline double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace rlrun
