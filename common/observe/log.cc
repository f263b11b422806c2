#include "common/observe/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
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

// Output state: the file copy and the status line, under one lock so a line and a redraw of the
// status line never interleave.
std::mutex g_out_mu;
int g_file = -1;
std::string g_file_path;
int64_t g_file_bytes = 0;    // in the file now open
int64_t g_rotate_bytes = 0;  // 0: never rotate
std::string g_status;  // shown at the bottom of a terminal; empty: none
std::chrono::steady_clock::time_point g_last_plain_status{};
const bool g_tty = ::isatty(STDERR_FILENO) == 1;

void write_all(int fd, std::string_view bytes) {
  ssize_t ignored = ::write(fd, bytes.data(), bytes.size());
  (void)ignored;
}

std::string prefix(Level level) {
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
  return std::string("[rlrun ") + stamp + " " + level_letter(level) + " " + name + "] ";
}

// Under g_out_mu. Past g_rotate_bytes the file becomes <path>.1 and a new one starts; a failed
// rename stops the rotation (the file goes on growing) rather than the log.
void write_file_locked(std::string_view line) {
  if (g_file < 0) return;
  if (g_rotate_bytes > 0 && g_file_bytes >= g_rotate_bytes) {
    const std::string older = g_file_path + ".1";
    const int fd = ::rename(g_file_path.c_str(), older.c_str()) == 0
                       ? ::open(g_file_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644)
                       : -1;
    if (fd >= 0) {
      ::close(g_file);
      g_file = fd;
      g_file_bytes = 0;
    } else {
      g_rotate_bytes = 0;
    }
  }
  write_all(g_file, line);
  g_file_bytes += static_cast<int64_t>(line.size());
}

}  // namespace

void set_process_name(std::string name) {
  std::lock_guard<std::mutex> lock(g_name_mu);
  g_process_name = std::move(name);
}

void set_min_level(Level level) { g_min_level.store(static_cast<int>(level)); }

void write(Level level, std::string_view message) {
  if (static_cast<int>(level) < g_min_level.load()) return;
  std::string line = prefix(level);
  line.append(message);
  line.push_back('\n');
  std::lock_guard<std::mutex> lock(g_out_mu);
  // One write(2) per line, so lines from threads and processes sharing a log file never
  // interleave; on a terminal the status line is cleared first and drawn again below the line.
  if (g_tty && !g_status.empty()) {
    write_all(STDERR_FILENO, "\r\033[K" + line + g_status);
  } else {
    write_all(STDERR_FILENO, line);
  }
  write_file_locked(line);
}

bool set_file(const std::string& path, int64_t rotate_bytes) {
  const int fd = path.empty() ? -1 : ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  struct stat info {};
  std::lock_guard<std::mutex> lock(g_out_mu);
  if (g_file >= 0) ::close(g_file);
  g_file = fd;
  g_file_path = path;
  g_file_bytes = fd >= 0 && ::fstat(fd, &info) == 0 ? static_cast<int64_t>(info.st_size) : 0;  // a resumed run appends
  g_rotate_bytes = rotate_bytes;
  return path.empty() || fd >= 0;
}

void status(std::string_view text, bool force, std::chrono::steady_clock::duration plain_interval) {
  const std::string line = prefix(Level::kInfo) + std::string(text) + "\n";
  std::lock_guard<std::mutex> lock(g_out_mu);
  write_file_locked(line);
  if (g_tty) {
    g_status = std::string(text);
    write_all(STDERR_FILENO, "\r\033[K" + g_status);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!force && g_last_plain_status != std::chrono::steady_clock::time_point{} &&
      now - g_last_plain_status < plain_interval)
    return;
  g_last_plain_status = now;
  write_all(STDERR_FILENO, line);
}

void end_status() {
  std::lock_guard<std::mutex> lock(g_out_mu);
  if (g_tty && !g_status.empty()) write_all(STDERR_FILENO, "\n");
  g_status.clear();
}

void RateLimited::write(Level level, std::string_view message) {
  const auto now = now_();
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
