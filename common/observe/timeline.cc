#include "common/observe/timeline.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "common/observe/log.h"

namespace rlrun {
namespace {

constexpr size_t kFlushBytes = 256 * 1024;

int this_thread_id() {
  thread_local const int tid = static_cast<int>(::syscall(SYS_gettid));
  return tid;
}

void append_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";  // JSON has no NaN/inf
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  out += buf;
}

// The common head of every event: {"ph":"X","name":"...","cat":"...","pid":1,"tid":2
std::string event_head(char phase, std::string_view name, std::string_view category, int pid,
                       int tid) {
  std::string e = "{\"ph\":\"";
  e += phase;
  e += "\",\"name\":";
  append_json_string(e, name);
  if (!category.empty()) {
    e += ",\"cat\":";
    append_json_string(e, category);
  }
  e += ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid);
  return e;
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;  // UTF-8 passes through; invalid bytes are the caller's (names are ours)
        }
    }
  }
  out += '"';
}

JsonArgs& JsonArgs::add(std::string_view key, double value) {
  if (!body_.empty()) body_ += ',';
  append_json_string(body_, key);
  body_ += ':';
  append_number(body_, value);
  return *this;
}

JsonArgs& JsonArgs::add(std::string_view key, int64_t value) {
  if (!body_.empty()) body_ += ',';
  append_json_string(body_, key);
  body_ += ':' + std::to_string(value);
  return *this;
}

JsonArgs& JsonArgs::add(std::string_view key, std::string_view value) {
  if (!body_.empty()) body_ += ',';
  append_json_string(body_, key);
  body_ += ':';
  append_json_string(body_, value);
  return *this;
}

Timeline& global_timeline() {
  static Timeline timeline;  // its destructor closes the file at exit if main() did not
  return timeline;
}

std::string timeline_path(const std::string& dir, const std::string& process) {
  std::string name = "timeline-";
  for (char c : process) {
    const bool safe =
        std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    name += safe ? c : '_';
  }
  name += ".json";
  return dir.empty() ? name : (dir.back() == '/' ? dir + name : dir + "/" + name);
}

namespace {

// "<stem>.json" -> "<stem>.<tag>.json"; any other name gets ".<tag>" at its end.
std::string tagged_timeline_path(const std::string& path, const std::string& tag) {
  const std::string ext = ".json";
  const bool json = path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  return json ? path.substr(0, path.size() - ext.size()) + "." + tag + ext : path + "." + tag;
}

constexpr int kMaxEarlierTimelines = 10000;  // far past max_worker_restarts: a bound, never reached

bool timeline_part_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec) || std::filesystem::exists(rotated_timeline_path(path), ec);
}

// A non-empty regular file at `path` (the one a replaced process wrote) and its rotated part move to
// the first free earlier_timeline_path, so that open() does not truncate them. A failed rename is
// said, and the file is then started again as before.
void keep_earlier_timeline(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || std::filesystem::file_size(path, ec) == 0 || ec) return;
  for (int n = 1; n <= kMaxEarlierTimelines; ++n) {
    const std::string earlier = earlier_timeline_path(path, n);
    if (timeline_part_exists(earlier)) continue;
    for (const auto& [from, to] : {std::pair{rotated_timeline_path(path), rotated_timeline_path(earlier)},
                                   std::pair{path, earlier}}) {
      if (std::filesystem::exists(from, ec) && std::rename(from.c_str(), to.c_str()) != 0)
        log::warn(str("timeline: cannot keep `", from, "` as `", to, "`: ", std::strerror(errno),
                      "; its events are overwritten"));
    }
    return;
  }
}

}  // namespace

std::string rotated_timeline_path(const std::string& path) { return tagged_timeline_path(path, "1"); }

std::string earlier_timeline_path(const std::string& path, int n) {
  return tagged_timeline_path(path, str("prev-", n));
}

std::vector<std::string> timeline_files(const std::string& dir, const std::string& process) {
  const std::string path = timeline_path(dir, process);
  std::vector<std::string> files;
  const auto add = [&](const std::string& p) {
    std::error_code ec;
    if (std::filesystem::exists(p, ec)) files.push_back(p);
  };
  for (int n = 1; n <= kMaxEarlierTimelines && timeline_part_exists(earlier_timeline_path(path, n)); ++n) {
    add(rotated_timeline_path(earlier_timeline_path(path, n)));
    add(earlier_timeline_path(path, n));
  }
  add(rotated_timeline_path(path));
  add(path);
  return files;
}

Timeline::~Timeline() { close(); }

Status Timeline::open(const std::string& path, const std::string& process_name, int pid,
                      std::chrono::milliseconds flush_interval) {
  close();
  keep_earlier_timeline(path);
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    return io_error(str("timeline: cannot create `", path, "`: ", std::strerror(errno),
                        "; check that its directory exists and is writable"));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  file_ = f;
  path_ = path;
  process_name_ = process_name;
  bytes_written_ = 2;
  pid_ = pid > 0 ? pid : static_cast<int>(::getpid());
  flush_interval_ = flush_interval;
  origin_ = std::chrono::steady_clock::now();
  epoch_us_ = std::chrono::duration_cast<std::chrono::microseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  std::fputs("[\n", file_);
  first_event_ = true;
  buffer_.clear();
  stop_ = false;
  write_failed_ = false;
  buffer_ += metadata("process_name", 0, process_name);
  first_event_ = false;
  for (const auto& [tid, name] : thread_names_)
    buffer_ += ",\n" + metadata("thread_name", tid, name);
  flush_locked();
  flusher_ = std::thread([this] { flusher_loop(); });
  enabled_.store(true, std::memory_order_release);  // publishes the clock origin to now_us()
  return Status();
}

void Timeline::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!file_ && !flusher_.joinable()) return;  // a failed rotation leaves no file, but the flusher
    enabled_.store(false, std::memory_order_release);
    stop_ = true;
  }
  wake_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  flush_locked();
  if (!file_) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

void Timeline::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  flush_locked();
}

void Timeline::set_rotate_bytes(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  rotate_bytes_ = bytes;
}

void Timeline::flush_locked() {
  if (!file_ || buffer_.empty()) return;
  if (rotate_bytes_ > 0 && bytes_written_ >= rotate_bytes_) rotate_locked();
  bytes_written_ += static_cast<int64_t>(buffer_.size());
  const bool ok = std::fwrite(buffer_.data(), 1, buffer_.size(), file_) == buffer_.size() &&
                  std::fflush(file_) == 0;  // to the kernel: survives a crash of this process
  if (!ok && !write_failed_) {
    write_failed_ = true;  // warn once; later events are still attempted
    log::warn(str("timeline: writing `", path_, "` failed: ", std::strerror(errno),
                  "; the timeline will miss events (disk full?)"));
  }
  buffer_.clear();
}

// The file is complete (closing `]`) before the rename: a reader of the .1 file sees valid JSON.
// The buffer (events after the limit) goes to the new file, behind the names.
void Timeline::rotate_locked() {
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  const std::string rotated = rotated_timeline_path(path_);
  if (std::rename(path_.c_str(), rotated.c_str()) != 0)
    log::warn(str("timeline: cannot rename `", path_, "` to `", rotated, "`: ", std::strerror(errno),
                  "; starting it again"));
  file_ = std::fopen(path_.c_str(), "w");
  if (!file_) {
    enabled_.store(false, std::memory_order_release);
    log::warn(str("timeline: cannot create `", path_, "` again after rotating it: ", std::strerror(errno),
                  "; no more timeline events from this process"));
    buffer_.clear();
    return;
  }
  std::string head = "[\n" + metadata("process_name", 0, process_name_);
  for (const auto& [tid, name] : thread_names_) head += ",\n" + metadata("thread_name", tid, name);
  if (!buffer_.empty() && buffer_.compare(0, 2, ",\n") != 0) head += ",\n";
  buffer_.insert(0, head);
  bytes_written_ = 0;
}

void Timeline::flusher_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, flush_interval_, [this] { return stop_; });
    flush_locked();
  }
}

int64_t Timeline::now_us() const {
  return epoch_us_ + std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::steady_clock::now() - origin_)
                         .count();
}

std::string Timeline::metadata(std::string_view what, int tid, std::string_view value) const {
  std::string e = event_head('M', what, {}, pid_, tid);
  e += ",\"args\":{\"name\":";
  append_json_string(e, value);
  e += "}}";
  return e;
}

void Timeline::append(std::string&& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!file_) return;  // closed between the caller's enabled() check and now
  if (!first_event_) buffer_ += ",\n";
  first_event_ = false;
  buffer_ += line;
  if (buffer_.size() >= kFlushBytes) flush_locked();
}

void Timeline::set_thread_name(std::string_view name) {
  const int tid = this_thread_id();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bool found = false;
    for (auto& [t, n] : thread_names_) {
      if (t == tid) {
        n = std::string(name);
        found = true;
      }
    }
    if (!found) thread_names_.emplace_back(tid, std::string(name));
  }
  if (enabled()) append(metadata("thread_name", tid, name));
}

void Timeline::complete(std::string_view name, std::string_view category, int64_t start_us,
                        int64_t dur_us, std::string_view args_json) {
  if (!enabled()) return;
  std::string e = event_head('X', name, category, pid_, this_thread_id());
  e +=
      ",\"ts\":" + std::to_string(start_us) + ",\"dur\":" + std::to_string(dur_us < 0 ? 0 : dur_us);
  if (!args_json.empty()) {
    e += ",\"args\":";
    e += args_json;
  }
  e += '}';
  append(std::move(e));
}

void Timeline::counter(std::string_view name,
                       std::initializer_list<std::pair<std::string_view, double>> series) {
  if (!enabled()) return;
  std::string e = event_head('C', name, {}, pid_, this_thread_id());
  JsonArgs args;
  for (const auto& [key, value] : series) args.add(key, value);
  const std::string args_json = args.str();
  e += ",\"ts\":" + std::to_string(now_us()) +
       ",\"args\":" + (args_json.empty() ? "{}" : args_json) + '}';
  append(std::move(e));
}

void Timeline::instant(std::string_view name, std::string_view category,
                       std::string_view args_json) {
  if (!enabled()) return;
  std::string e = event_head('i', name, category, pid_, this_thread_id());
  e += ",\"s\":\"t\",\"ts\":" + std::to_string(now_us());
  if (!args_json.empty()) {
    e += ",\"args\":";
    e += args_json;
  }
  e += '}';
  append(std::move(e));
}

}  // namespace rlrun
