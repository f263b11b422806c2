// log.h - one line per event on stderr: "[rlrun 12:34:56.789 I orchestrator] message".
// Thread-safe (one write(2) per line). The process name is set once at start-up by main().
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace rlrun::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_process_name(std::string name);  // "orchestrator", "trainer-0", "rollout-1", ...
void set_min_level(Level level);
void write(Level level, std::string_view message);

inline void debug(std::string_view m) { write(Level::kDebug, m); }
inline void info(std::string_view m) { write(Level::kInfo, m); }
inline void warn(std::string_view m) { write(Level::kWarn, m); }
inline void error(std::string_view m) { write(Level::kError, m); }

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
