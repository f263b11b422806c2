// test_seed.h - the seed of a test that draws at random: fresh each run, printed, and replayable.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

namespace rlrun::testing {

// RLRUN_TEST_SEED when set (to replay a failure), else a fresh one; printed either way and
// recorded in the test's XML output, so a failure says how to see it again.
inline uint32_t test_seed() {
  const char* env = std::getenv("RLRUN_TEST_SEED");
  const uint32_t seed = env != nullptr && *env ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10))
                                               : std::random_device{}();
  std::printf("random seed %u (RLRUN_TEST_SEED=%u replays it)\n", seed, seed);
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

}  // namespace rlrun::testing
