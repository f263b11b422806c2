// liveness_beacon.cc - the beacon's thread (liveness_beacon.h).
#include "common/protocol/liveness_beacon.h"

#include <algorithm>
#include <utility>

#include "common/observe/memory.h"

namespace rlrun {

LivenessBeacon::LivenessBeacon(ControlClient& client, std::chrono::milliseconds interval)
    : client_(client), interval_(std::max(interval, std::chrono::milliseconds(1))), last_sent_(Clock::now()),
      thread_([this] { run(); }) {}

LivenessBeacon::~LivenessBeacon() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void LivenessBeacon::sent(const Heartbeat& heartbeat) {
  std::lock_guard<std::mutex> lock(mutex_);
  latest_ = heartbeat;  // WireArray members share their storage: a cheap, thread-safe copy
  have_latest_ = true;
  last_sent_ = Clock::now();
}

uint64_t LivenessBeacon::beats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return beats_;
}

void LivenessBeacon::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    const Clock::time_point due = last_sent_ + interval_;
    if (!have_latest_ || Clock::now() < due) {
      wake_.wait_until(lock, have_latest_ ? due : Clock::now() + interval_);
      continue;
    }
    Heartbeat beat = latest_;
    lock.unlock();
    if (Result<ProcessMemory> mem = read_process_memory(); mem.ok()) {
      beat.memory_bytes = static_cast<uint64_t>(mem->resident_bytes);
      beat.peak_memory_bytes = static_cast<uint64_t>(mem->peak_resident_bytes);
    }
    const ControlClient::TrySend sent = client_.try_send_frames(encode(beat, 0));
    lock.lock();
    if (sent == ControlClient::TrySend::kSent) {
      ++beats_;
      last_sent_ = Clock::now();
    } else {  // busy: the worker waits in the socket (so it beats itself); failed: the queue is full
      wake_.wait_for(lock, interval_ / 4 + std::chrono::milliseconds(1));
    }
  }
}

}  // namespace rlrun
