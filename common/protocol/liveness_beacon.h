// liveness_beacon.h - a worker's heartbeats while its own thread computes: liveness apart from work.
//
// A worker's thread sends its Heartbeats between units of work (an engine step, a train step, a
// weight sync). One unit can outlast heartbeat_timeout_seconds on a slow or busy host (a prefill
// of 32 prompts on a CPU whose BLAS fell back to SSE3 kernels took longer than 10 s), and the
// orchestrator must not take a working process for a dead one. The beacon's thread repeats the
// worker's latest Heartbeat, with fresh memory figures, whenever the worker itself has sent none
// for an interval and is not using the socket (a thread waiting in receive() is not computing: it
// sends its own heartbeats).
//
// What still goes silent: a process that died, and one that was stopped (SIGSTOP stops every
// thread, the beacon's too). A worker thread that hangs while the process runs keeps beating: the
// work's own timeouts find it (rollout_request_timeout_seconds, train_step_timeout_seconds).
//
// Threads: construct, sent() and destroy on the worker's thread; the beacon's thread only reads
// the latest heartbeat (under a mutex) and sends through ControlClient::try_send_frames. The
// client must outlive the beacon.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "common/protocol/control_plane.h"
#include "common/protocol/protocol.h"

namespace rlrun {

class LivenessBeacon {
 public:
  // Starts the thread. `interval`: heartbeat_interval_seconds (at least 1 ms).
  LivenessBeacon(ControlClient& client, std::chrono::milliseconds interval);
  ~LivenessBeacon();  // stops and joins the thread
  LivenessBeacon(const LivenessBeacon&) = delete;
  LivenessBeacon& operator=(const LivenessBeacon&) = delete;

  // The worker just sent `heartbeat`: the beacon waits an interval from now, and repeats this one.
  void sent(const Heartbeat& heartbeat);
  // Heartbeats the beacon's thread sent (not the worker's own).
  uint64_t beats() const;

 private:
  using Clock = std::chrono::steady_clock;
  void run();

  ControlClient& client_;
  const std::chrono::milliseconds interval_;
  mutable std::mutex mutex_;  // guards the members below
  std::condition_variable wake_;
  Heartbeat latest_;
  bool have_latest_ = false;
  Clock::time_point last_sent_;
  uint64_t beats_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace rlrun
