#include "common/observe/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace rlrun::log {
namespace {

std::mutex g_name_mu;
std::string g_process_name = "rlrun";
std::atomic<int> g_min_level{static_cast<int>(Level::kInfo)};

char level_letter(Level level) {
  switch (level) {
    case Level::kDebug: return 'D';
    case Level::kInfo: return 'I';
    case Level::kWarn: return 'W';
    case Level::kError: return 'E';
  }
  return '?';
}

}  // namespace

void set_process_name(std::string name) {
  std::lock_guard<std::mutex> lock(g_name_mu);
  g_process_name = std::move(name);
}

void set_min_level(Level level) { g_min_level.store(static_cast<int>(level)); }

void write(Level level, std::string_view message) {
  if (static_cast<int>(level) < g_min_level.load()) return;
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
  std::string name;
  {
    std::lock_guard<std::mutex> lock(g_name_mu);
    name = g_process_name;
  }
  std::string line = std::string("[rlrun ") + stamp + " " + level_letter(level) + " " + name + "] ";
  line.append(message);
  line.push_back('\n');
  // One write(2) so lines from threads and processes sharing a log file never interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

void RateLimited::write(Level level, std::string_view message) {
  const auto now = std::chrono::steady_clock::now();
  if (written_ && now - last_written_ < interval_) {
    ++held_back_;
    return;
  }
  std::string line(message);
  if (held_back_ > 0) {
    const double seconds = std::chrono::duration<double>(now - last_written_).count();
    char tail[96];
    std::snprintf(tail, sizeof tail, " [%lld more like this in the last %.0f s]",
                  static_cast<long long>(held_back_), seconds);
    line += tail;
  }
  log::write(level, line);
  written_ = true;
  last_written_ = now;
  held_back_ = 0;
}

}  // namespace rlrun::log
