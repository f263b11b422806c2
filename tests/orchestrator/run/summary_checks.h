// summary_checks.h - checks on a run's summary.json shared by the run tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>

namespace rlrun::testing {

// Every sample is accounted for exactly once: none lost, no refused (duplicate) transition,
// every generated sample was trained or discarded, and every dispatched one is in exactly one
// state (trained, discarded, cancelled, or in flight when the run stopped).
inline void expect_every_sample_accounted_for(const nlohmann::json& summary) {
  const nlohmann::json& s = summary["samples"];
  EXPECT_EQ(s["lost"], 0) << summary.dump(2);
  EXPECT_EQ(s["anomalies"], 0) << summary.dump(2);
  int64_t discarded = 0;
  for (const auto& [reason, n] : s["discarded"].items()) discarded += n.get<int64_t>();
  // discarded without being generated: a failed generation, an episode that failed or made no call
  const int64_t never_generated = s["discarded"].value("generation_error", 0) + s["discarded"].value("episode_failed", 0) +
                                  s["discarded"].value("episode_no_turns", 0);
  EXPECT_EQ(s["trained"].get<int64_t>() + discarded - never_generated, s["generated"].get<int64_t>())
      << summary.dump(2);
  EXPECT_EQ(s["trained"].get<int64_t>() + discarded + s["cancelled"].get<int64_t>() +
                s["in_flight_at_exit"].get<int64_t>(),
            s["dispatched"].get<int64_t>())
      << summary.dump(2);
}

}  // namespace rlrun::testing
