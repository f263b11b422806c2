// episode_client.h - the environment server's client: one POST per episode attempt, answered
// when the episode is over (docs/environments.md has the protocol).
//
// Contract:
// - I/O happens on the caller's thread, never blocking: poll(), called from the orchestrator's
//   loop, advances transfers (libcurl's multi interface) and returns the attempts that ended.
// - Every started attempt ends exactly once: by poll() (a reply checked against the protocol, or
//   the reason it failed: no connection, the server hung past timeout_seconds, an HTTP status
//   other than 200, a reply that is not the protocol's) or by abandon(). Nothing is retried here:
//   the caller decides (a failed attempt's session holds calls the environment made).
// - Replies are untrusted bytes: a hostile reply is a failed attempt, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace rlrun::orchestrator {

struct EpisodeClientOptions {
  std::string url;                           // http:// or https://
  double timeout_seconds = 600;              // one episode, connection included
  int64_t max_response_bytes = int64_t{1} << 20;
};

// What an environment says at the end of an episode.
struct EpisodeReply {
  double reward = 0;
  bool has_correct = false, correct = false;  // "correct" (optional): what held-out accuracy counts
  std::map<std::string, double> metrics;      // "metrics" (optional): name -> number
};

struct EpisodeEnd {
  uint64_t key = 0;
  bool ok = false;
  EpisodeReply reply;      // ok
  std::string error;       // !ok: what went wrong, naming the URL
  double seconds = 0;      // request sent -> answer
};

// What the orchestrator's episodes need of an environment server (run/samples/episode_runner.h);
// EpisodeClient is the real one, a unit test's double answers in memory.
class EpisodeEnvironment {
 public:
  virtual ~EpisodeEnvironment() = default;
  // Sends `body` (a JSON object) for attempt `key`, unique among those running.
  virtual void start(uint64_t key, std::string body) = 0;
  virtual std::vector<EpisodeEnd> poll() = 0;
  virtual void abandon(uint64_t key) = 0;  // ends the attempt's transfer; poll() never reports it
};

class EpisodeClient : public EpisodeEnvironment {
 public:
  // Errors: the URL is not http(s) (naming task.environment_url), an option out of range.
  static Result<std::unique_ptr<EpisodeClient>> create(EpisodeClientOptions options);
  ~EpisodeClient() override;
  EpisodeClient(const EpisodeClient&) = delete;
  EpisodeClient& operator=(const EpisodeClient&) = delete;

  void start(uint64_t key, std::string body) override;
  std::vector<EpisodeEnd> poll() override;
  void abandon(uint64_t key) override;
  size_t running() const;
  const EpisodeClientOptions& options() const { return options_; }

 private:
  struct Impl;
  explicit EpisodeClient(EpisodeClientOptions options);
  EpisodeClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

// A 200 reply's body checked against the protocol: {"reward": finite number, "correct": bool?,
// "metrics": {name: finite number}?}. The error says what is wrong.
Result<EpisodeReply> parse_episode_reply(std::string_view body);

}  // namespace rlrun::orchestrator
