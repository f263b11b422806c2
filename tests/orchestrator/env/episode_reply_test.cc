// The environment's reply is untrusted: anything but the protocol's shape is a failed attempt
// with a message saying what is wrong (episode_client.h parse_episode_reply), never a crash.
#include <gtest/gtest.h>

#include <string>

#include "orchestrator/env/episode_client.h"

namespace rlrun::orchestrator {
namespace {

TEST(EpisodeReply, TheProtocolsShape) {
  Result<EpisodeReply> r = parse_episode_reply(R"({"reward": 0.5, "correct": true, "metrics": {"turns": 2}})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_DOUBLE_EQ(r->reward, 0.5);
  EXPECT_TRUE(r->has_correct && r->correct);
  EXPECT_EQ(r->metrics.at("turns"), 2.0);
  r = parse_episode_reply(R"({"reward": -1, "correct": null, "extra": "ignored"})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_correct);
}

TEST(EpisodeReply, HostileRepliesAreErrorsThatSayWhy) {
  const std::pair<std::string, std::string> cases[] = {
      {"<html>", "not JSON"},
      {"[1, 2]", "not a JSON object"},
      {R"({"score": 1})", "no numeric \"reward\""},
      {R"({"reward": "1"})", "no numeric \"reward\""},
      {R"({"reward": 1e999})", "not JSON"},  // out of range for a double
      {R"({"reward": NaN})", "not JSON"},
      {R"({"reward": 1, "correct": 1})", "\"correct\""},
      {R"({"reward": 1, "metrics": [1]})", "\"metrics\" is not an object"},
      {R"({"reward": 1, "metrics": {"x": "a"}})", "not a finite number"},
      {std::string(100000, '[') + std::string(100000, ']'), "deeper than 16"},
      {"", "not JSON"},
  };
  for (const auto& [body, why] : cases) {
    const Result<EpisodeReply> r = parse_episode_reply(body);
    ASSERT_FALSE(r.ok()) << body.substr(0, 40);
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace rlrun::orchestrator
