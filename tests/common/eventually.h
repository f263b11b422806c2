// eventually(): the one way a test waits for something another thread or process does.
//
//   ASSERT_TRUE(testing::eventually([&] { return fs::exists(pidfile); }, 3s));
//
// Polls `condition` every `poll` until it holds (true) or `timeout` passes (false, after one last
// look). A fixed sleep is a guess at how long something takes; this waits exactly as long as it
// takes, up to a bound that only a broken program reaches.
#pragma once

#include <chrono>
#include <thread>

namespace rlrun::testing {

template <class Condition>
bool eventually(Condition&& condition, std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(poll);
  }
  return static_cast<bool>(condition());
}

}  // namespace rlrun::testing
