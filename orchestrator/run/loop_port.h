// run/loop_port.h - what a part of the loop may do outside itself: send a message to one of the
// run's processes, wait while the loop runs, and read the clocks.
//
// The Orchestrator's port sends through its ControlServer and waits by turning its loop (receive
// and handle messages, supervise, dispatch when asked), so a part waiting for answers gets them
// through its own handlers meanwhile. A unit test's port records what is sent, answers in its
// wait, and sets the time (tests/orchestrator/run/fake_port.h): the parts are tested without
// sockets or processes. A part keeps its port by value; the functions it holds must outlive it.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/clock.h"
#include "common/protocol/protocol.h"
#include "common/status.h"

namespace rlrun::orchestrator {

struct LoopPort {
  using Clock = std::chrono::steady_clock;
  // Sends `message` to the process named `peer` (a WorkerSlot's name). An error: not queued.
  std::function<Status(const std::string& peer, const Message& message)> send;
  // Turns the loop until `done` returns true (asked first, then after every turn), or returns the
  // error that ends the wait: done's own, or the loop's (an interrupt, a failure found meanwhile).
  // `dispatch`: rollout work goes on being dispatched meanwhile.
  std::function<Status(const std::function<Result<bool>()>& done, bool dispatch)> wait;
  std::function<Clock::time_point()> now = [] { return Clock::now(); };
  std::function<double()> unix_now = [] { return rlrun::unix_now(); };  // for records a person reads

  template <WireMessage T>
  Status send_to(const std::string& peer, const T& message) const {
    return send(peer, Message{0, message});
  }
  double seconds_since(Clock::time_point start) const { return std::chrono::duration<double>(now() - start).count(); }
};

}  // namespace rlrun::orchestrator
