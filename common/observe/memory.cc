#include "common/observe/memory.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/check.h"
#include "common/observe/log.h"

namespace rlrun {
namespace {

// Every VmHWM value seen just before a reset: the process-lifetime peak survives clear_refs.
std::atomic<int64_t> g_peak_before_reset{0};

// Live trackers. Every reset of VmHWM first folds the mark into their open phases, so a reset by
// one tracker (or by anyone calling reset_peak_resident) never hides a peak from another.
// Lock order: g_reset_mutex, then a tracker's mutex_.
std::mutex g_reset_mutex;
std::vector<PeakMemoryTracker*> g_trackers;  // guarded by g_reset_mutex

void atomic_max(std::atomic<int64_t>& target, int64_t value) {
  int64_t seen = target.load(std::memory_order_relaxed);
  while (value > seen && !target.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// "VmRSS:\t  1700 kB" -> 1700 * 1024; -1 when the key is absent.
int64_t parse_kb_line(const std::string& text, const char* key) {
  size_t at = 0;
  const size_t key_len = std::strlen(key);
  while ((at = text.find(key, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      const char* p = text.c_str() + at + key_len;
      char* end = nullptr;
      long long kb = std::strtoll(p, &end, 10);
      if (end == p || kb < 0) return -1;
      return static_cast<int64_t>(kb) * 1024;
    }
    at += key_len;
  }
  return -1;
}

// VmRSS and the kernel's VmHWM (since the last reset), without the lifetime fold.
Result<ProcessMemory> read_raw() {
  int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return io_error(str("cannot open /proc/self/status: ", std::strerror(errno),
                        "; memory figures need Linux with /proc mounted"));
  }
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  ProcessMemory m = parse_proc_status(text);
  if (m.resident_bytes == 0) return io_error("/proc/self/status has no VmRSS line");
  return m;
}

bool write_clear_refs() {
  int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
}

}  // namespace

ProcessMemory parse_proc_status(const std::string& text) {
  ProcessMemory m;
  m.resident_bytes = std::max<int64_t>(0, parse_kb_line(text, "VmRSS:"));
  m.peak_resident_bytes = std::max<int64_t>(0, parse_kb_line(text, "VmHWM:"));
  return m;
}

Result<ProcessMemory> read_process_memory() {
  RLRUN_ASSIGN_OR_RETURN(ProcessMemory m, read_raw());
  m.peak_resident_bytes = std::max(m.peak_resident_bytes, g_peak_before_reset.load());
  return m;
}

void keep_freed_heap_memory() {
  // glibc (mallopt(3)): M_MMAP_MAX 0 turns off mmap for large blocks; M_TRIM_THRESHOLD -1 turns off
  // handing the top of the heap back.
  if (::mallopt(M_MMAP_MAX, 0) != 1 || ::mallopt(M_TRIM_THRESHOLD, -1) != 1)
    log::warn("could not tune the heap to keep freed memory (mallopt); steps will page-fault their memory again");
}

bool reset_peak_resident() {
  std::lock_guard<std::mutex> lock(g_reset_mutex);
  Result<ProcessMemory> before = read_raw();
  if (!before.ok()) return false;
  // A peak reached between this read and the write below is lost; the window is microseconds.
  atomic_max(g_peak_before_reset, before->peak_resident_bytes);
  for (PeakMemoryTracker* tracker : g_trackers) {
    std::lock_guard<std::mutex> tracker_lock(tracker->mutex_);
    tracker->fold_locked(*before);
  }
  return write_clear_refs();
}

// ---------------------------------------------------------------------------- PeakMemoryTracker

PeakMemoryTracker::PeakMemoryTracker(bool force_sampling, std::chrono::milliseconds sample_interval)
    : mode_(Mode::kSampling), sample_interval_(sample_interval) {
  if (!force_sampling && reset_peak_resident()) {
    mode_ = Mode::kClearRefs;
  } else {
    if (!force_sampling) {
      log::warn(str("cannot reset the resident-memory high-water mark (/proc/self/clear_refs: ",
                    std::strerror(errno), "); per-phase peaks are sampled every ",
                    sample_interval_.count(), " ms and may miss short spikes"));
    }
    sampler_ = std::thread([this] { sampler_loop(); });
  }
  std::lock_guard<std::mutex> lock(g_reset_mutex);
  g_trackers.push_back(this);
}

PeakMemoryTracker::~PeakMemoryTracker() {
  {
    std::lock_guard<std::mutex> lock(g_reset_mutex);
    g_trackers.erase(std::find(g_trackers.begin(), g_trackers.end(), this));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

const char* PeakMemoryTracker::mode_name() const {
  return mode_ == Mode::kClearRefs ? "clear_refs" : "sampling";
}

void PeakMemoryTracker::fold_locked(const ProcessMemory& now) {
  for (Open& o : open_) {
    o.running_peak = std::max(o.running_peak, now.resident_bytes);
    if (mode_ == Mode::kClearRefs) {
      // VmHWM was reset when the innermost open phase began, so it lies inside every open phase.
      o.running_peak = std::max(o.running_peak, now.peak_resident_bytes);
    } else if (now.peak_resident_bytes > o.hwm_at_start) {
      // A new all-time high was reached after this phase began: that high is this phase's peak.
      o.running_peak = std::max(o.running_peak, now.peak_resident_bytes);
    }
  }
}

void PeakMemoryTracker::begin(const std::string& phase) {
  // Folds VmHWM into every open phase (of every tracker), then resets it to VmRSS.
  if (mode_ == Mode::kClearRefs && !reset_peak_resident()) {
    RLRUN_CHECK(false, "/proc/self/clear_refs worked at start-up and failed later");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Result<ProcessMemory> now = read_raw();
  if (!now.ok()) now = ProcessMemory{};
  fold_locked(*now);
  Open o;
  o.phase = phase;
  o.start_bytes = now->resident_bytes;
  o.running_peak = now->resident_bytes;
  o.hwm_at_start = now->peak_resident_bytes;
  open_.push_back(std::move(o));
  wake_.notify_all();
}

void PeakMemoryTracker::end() {
  std::lock_guard<std::mutex> lock(mutex_);
  RLRUN_CHECK(!open_.empty(), "PeakMemoryTracker::end() without a matching begin()");
  Result<ProcessMemory> now = read_raw();
  if (now.ok()) fold_locked(*now);
  Open o = std::move(open_.back());
  open_.pop_back();
  auto it = std::find_if(done_.begin(), done_.end(),
                         [&](const PhasePeak& p) { return p.phase == o.phase; });
  if (it == done_.end()) {
    done_.push_back(PhasePeak{o.phase, 0, 0, 0, 0});
    it = done_.end() - 1;
  }
  it->peak_bytes = std::max(it->peak_bytes, o.running_peak);
  it->last_peak_bytes = o.running_peak;
  it->start_bytes = o.start_bytes;
  it->count += 1;
}

std::vector<PeakMemoryTracker::PhasePeak> PeakMemoryTracker::peaks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

int64_t PeakMemoryTracker::samples() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return samples_;
}

int64_t PeakMemoryTracker::peak(const std::string& phase) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const PhasePeak& p : done_) {
    if (p.phase == phase) return p.peak_bytes;
  }
  return 0;
}

void PeakMemoryTracker::sampler_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (open_.empty()) {
      wake_.wait(lock, [this] { return stop_ || !open_.empty(); });
      continue;
    }
    // Read under the lock so a sample is never folded into a phase that began after it (~20 us).
    Result<ProcessMemory> now = read_raw();
    if (now.ok()) fold_locked(*now);
    ++samples_;
    wake_.wait_for(lock, sample_interval_, [this] { return stop_; });
  }
}

}  // namespace rlrun
