// timeline.h - Chrome-trace timeline (opens in Perfetto / chrome://tracing).
//
// Each process streams its events to its own file, `timeline-<process>.json`; at exit the
// orchestrator merges the files into one `timeline.json` (merge_timelines). File format: a JSON
// array, one event per line:
//   [
//   {"ph":"M","name":"process_name","pid":1234,"tid":0,"args":{"name":"trainer-0"}},
//   {"ph":"M","name":"thread_name","pid":1234,"tid":1240,"args":{"name":"main"}},
//   {"ph":"X","name":"forward_backward","cat":"trainer","pid":1234,"tid":1240,"ts":1763826000000123,"dur":5230,"args":{"step":3}},
//   {"ph":"C","name":"queue_depth","pid":1234,"tid":1240,"ts":1763826000005400,"args":{"groups":7}}
//   ]
// `ts` and `dur` are microseconds; ts counts from the Unix epoch (wall clock read once when the
// timeline opens, then advanced by the monotonic clock), so files from processes on machines with
// synchronised clocks line up. A process killed mid-run leaves a file without the closing `]`
// (and possibly a torn last line): Perfetto accepts that, and merge_timelines skips the torn event.
// Events still in the buffer (at most one flush interval, default 500 ms) are lost in a crash.
// A long run's file is bounded by set_rotate_bytes (timeline_max_mb): past it the file is closed,
// renamed `timeline-<process>.1.json` (replacing the older one) and a new one begun with the
// process and thread names, so a process never keeps more than about twice the limit on disk.
// A file already at the path belongs to a process this one replaces (a restarted worker, a resumed
// run): open() keeps it, with its rotated part, as `timeline-<process>.prev-N.json` (the first
// free N); timeline_files() lists them all for the merge.
//
// Cost (bench/observability_bench): with no timeline open a ScopedSpan is one atomic load, ~5 ns.
// With one open, ~1 us: the event is formatted on the calling thread and appended to a buffer
// under a mutex; a background thread writes the buffer every flush interval (or sooner when it
// passes 256 KiB). Each span is ~100 bytes of file.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"

namespace rlrun {

// One trace writer. Thread-safe: every method may be called from any thread.
class Timeline {
 public:
  Timeline() = default;
  ~Timeline();  // close()s
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Starts writing `path` (an earlier file there is kept, see the top) for process `process_name`
  // ("trainer-0") under trace pid `pid` (default: getpid()). Fails with io_error naming the file
  // when it cannot be created.
  Status open(const std::string& path, const std::string& process_name, int pid = 0,
              std::chrono::milliseconds flush_interval = std::chrono::milliseconds(500));
  // Writes what is buffered and the closing `]`. Safe to call twice.
  void close();
  bool enabled() const { return enabled_.load(std::memory_order_acquire); }
  // Writes what is buffered now (e.g. before an expected exit).
  void flush();
  // Past `bytes` written to the file (0: never), the next flush rotates it (see the top).
  void set_rotate_bytes(int64_t bytes);

  // Microseconds on the timeline's clock (see above); meaningful only while open.
  int64_t now_us() const;

  // Names the calling thread in the trace ("main", "recv", "sampler").
  void set_thread_name(std::string_view name);
  // A complete event ("ph":"X"). `args_json` is "" or a JSON object ("{\"step\":3}").
  void complete(std::string_view name, std::string_view category, int64_t start_us, int64_t dur_us,
                std::string_view args_json = {});
  // A counter sample ("ph":"C"): each series is drawn as a stacked track named `name`.
  void counter(std::string_view name,
               std::initializer_list<std::pair<std::string_view, double>> series);
  // An instant event ("ph":"i", thread scope), e.g. a discarded group.
  void instant(std::string_view name, std::string_view category, std::string_view args_json = {});

 private:
  void append(std::string&& line);
  void flush_locked();
  void rotate_locked();
  void flusher_loop();
  std::string metadata(std::string_view what, int tid, std::string_view value) const;

  std::atomic<bool> enabled_{false};
  int pid_ = 0;
  int64_t epoch_us_ = 0;                            // wall clock at open
  std::chrono::steady_clock::time_point origin_{};  // monotonic clock at open
  std::chrono::milliseconds flush_interval_{500};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::FILE* file_ = nullptr;
  std::string path_;
  std::string process_name_;
  int64_t bytes_written_ = 0;  // to the file now open
  int64_t rotate_bytes_ = 0;   // 0: never rotate
  std::string buffer_;
  std::vector<std::pair<int, std::string>> thread_names_;  // tid -> name, re-emitted by open()
  bool first_event_ = true;
  bool write_failed_ = false;
  bool stop_ = false;
  std::thread flusher_;
};

// The process's timeline, used by ScopedSpan by default. The process's main() opens it when the
// config asks for a timeline, e.g. global_timeline().open(timeline_path(dir, name), name), and
// closes it at exit (its destructor would too).
Timeline& global_timeline();

// "<dir>/timeline-<process>.json", the one naming rule writers and the merging orchestrator share.
// Characters of `process` outside [A-Za-z0-9._-] become '_'.
std::string timeline_path(const std::string& dir, const std::string& process);

// "<dir>/timeline-<process>.1.json" for "<dir>/timeline-<process>.json": where a rotated file goes.
std::string rotated_timeline_path(const std::string& path);

// "<dir>/timeline-<process>.prev-<n>.json": where open() keeps the n-th earlier file at `path`.
std::string earlier_timeline_path(const std::string& path, int n);

// Every file `process` left in `dir` that exists, oldest first: the earlier processes' (each one's
// rotated part first), then the rotated part and the file of the latest one.
std::vector<std::string> timeline_files(const std::string& dir, const std::string& process);

// Builds an args object from `"key":value` pairs: JsonArgs().add("step", 3).add("rank", 0).str()
class JsonArgs {
 public:
  JsonArgs& add(std::string_view key, double value);
  JsonArgs& add(std::string_view key, int64_t value);
  JsonArgs& add(std::string_view key, int value) { return add(key, static_cast<int64_t>(value)); }
  JsonArgs& add(std::string_view key, std::string_view value);
  std::string str() const { return body_.empty() ? std::string() : "{" + body_ + "}"; }

 private:
  std::string body_;
};

// Appends `s` as a JSON string literal (with quotes and escapes) to `out`.
void append_json_string(std::string& out, std::string_view s);

// Records a complete event from construction to destruction. `name` and `category` must outlive
// the span (string literals usually). Nesting on one thread shows as a flame stack in Perfetto.
class ScopedSpan {
 public:
  ScopedSpan(const char* name, const char* category, Timeline& timeline = global_timeline())
      : timeline_(timeline.enabled() ? &timeline : nullptr), name_(name), category_(category) {
    if (timeline_) start_us_ = timeline_->now_us();
  }
  ~ScopedSpan() {
    if (timeline_)
      timeline_->complete(name_, category_, start_us_, timeline_->now_us() - start_us_,
                          args_.str());
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

  // Attaches an argument shown when the span is selected (no-op when disabled).
  template <class V>
  ScopedSpan& arg(std::string_view key, V value) {
    if (timeline_) args_.add(key, value);
    return *this;
  }

 private:
  Timeline* timeline_;
  const char* name_;
  const char* category_;
  int64_t start_us_ = 0;
  JsonArgs args_;
};

// Merges per-process timeline files into one (`output`: a JSON array, one event per line, input
// by input; not sorted, Perfetto sorts on load), streaming in constant memory. Inputs may be
// truncated (crashed process): complete events are kept, a torn one is skipped with a warning.
// A missing or unreadable input is skipped with a warning. Processes of two inputs that share a
// pid (two hosts) get distinct pids: the later one is renumbered from 2^22 up. Any Chrome trace
// JSON file is accepted as an input too. Fails only when `output` cannot be written.
Status merge_timelines(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace rlrun
