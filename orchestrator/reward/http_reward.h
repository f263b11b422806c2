// http_reward.h - the http reward term: samples scored by an external reward server.
//
// Protocol (OpenRLHF's remote reward model): POST {url} with the JSON object
//   {"query": [prompt + completion, ...], "prompts": [prompt, ...], "labels": [reference, ...],
//    "metadata": [the dataset row (an object), ...]}            one entry per sample, in order
// answered by HTTP 200 with
//   {"rewards": [number, ...], "scores": [number, ...]?, "extra_logs": {name: [number, ...]}?}
// one number per sample in each array ("scores" and "extra_logs" are optional).
// examples/reward_server.py is a working server.
//
// Contract:
// - HttpRewardClient does its I/O on the caller's thread and never blocks: poll(), called from the
//   orchestrator's loop, advances transfers (libcurl's multi interface; names are resolved on
//   libcurl's resolver threads) and starts new requests. One thread uses a client.
// - submit() queues an item. poll() sends the queue front in requests of up to batch_size items,
//   at most max_in_flight at once; an item is not held back to fill a batch, so items gather into
//   larger requests only while every slot is busy.
// - A request that fails in any way (no connection, timeout, an HTTP status other than 200, a
//   reply that is not the protocol's: not JSON, no "rewards", a count that is not the request's,
//   a reward that is not a finite number, an "extra_logs" entry of the wrong length, a body larger
//   than max_response_bytes) puts its items back at the front of the queue. The next request
//   waits a back-off that doubles with each failure in a row (first_backoff_seconds ..
//   max_backoff_seconds), and while failures go on one request at a time probes the server. A
//   success ends the back-off and the count of failures.
// - Every submitted item is answered by poll() exactly once, or returned by abandon(): none is
//   lost or answered twice.
// - After max_failures requests fail in a row, fatal() holds the error (naming the URL and what
//   came back) and nothing more is sent: the caller stops the run, and abandon() gives back the
//   keys still waiting.
// - Replies are untrusted bytes: a hostile reply is a failed request, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"
#include "common/status.h"

namespace rlrun::orchestrator {

struct HttpRewardOptions {
  std::string url;                        // http:// or https://
  double timeout_seconds = 30;            // one request, connection included
  int64_t max_failures = 8;               // requests failing in a row before fatal()
  int64_t batch_size = 64;                // items per request at most
  int64_t max_in_flight = 4;              // requests at once
  double first_backoff_seconds = 0.5;     // after the first failure in a row; doubles with each
  double max_backoff_seconds = 30;
  int64_t max_response_bytes = 64 << 20;  // a larger reply is a failed request
};

// The task.reward_* keys (url, timeout, max_failures, batch_size, max_in_flight).
HttpRewardOptions http_reward_options(const TaskSection& task);

// The wait before the next request after `failures_in_row` (>= 1) failures in a row:
// first_backoff_seconds * 2^(failures_in_row - 1), at most max_backoff_seconds.
double http_reward_backoff_seconds(const HttpRewardOptions& options, int64_t failures_in_row);

struct RewardItem {
  uint64_t key = 0;            // the caller's name for the sample; unique among waiting items
  std::string query;           // prompt + completion, as the model saw and wrote them
  std::string prompt;
  std::string label;           // the reference answer
  std::string metadata_json = "{}";  // a JSON object (the dataset row)
};

struct RewardReply {
  uint64_t key = 0;
  double reward = 0;
  double score = 0;                    // "scores"[i], or the reward when the server sends none
  std::map<std::string, double> extra;  // "extra_logs" name -> this sample's value
};

class HttpRewardClient {
 public:
  struct Stats {
    int64_t requests = 0;         // sent
    int64_t failed_requests = 0;
    int64_t failures_in_row = 0;  // now
    int64_t in_flight = 0;        // requests now
    int64_t items_scored = 0;
    int64_t items_retried = 0;    // put back by a failed request (once per failure)
    int64_t items_waited = 0;     // not sent by the first poll() after submit (slots busy, back-off)
    // Successful requests' round trips, over the last kRoundTripWindow of them.
    double round_trip_last_seconds = 0, round_trip_median_seconds = 0, round_trip_max_seconds = 0;
  };
  static constexpr size_t kRoundTripWindow = 256;

  // Errors: the URL is not http(s) (naming task.reward_url), an option is out of range.
  static Result<std::unique_ptr<HttpRewardClient>> create(HttpRewardOptions options);
  ~HttpRewardClient();
  HttpRewardClient(const HttpRewardClient&) = delete;
  HttpRewardClient& operator=(const HttpRewardClient&) = delete;

  // Queues an item (also after fatal(): abandon() then returns it). Errors, and nothing queued:
  // its key is already waiting; metadata_json is not a JSON object.
  Status submit(RewardItem item);

  // Advances transfers, starts requests, and returns the items answered since the last call.
  std::vector<RewardReply> poll();

  size_t waiting() const;  // submitted, neither answered nor abandoned
  const Status& fatal() const;  // ok until max_failures requests failed in a row

  // Cancels every request in flight and returns the keys of every waiting item (queued first,
  // then those that were in flight); waiting() is 0 afterwards.
  std::vector<uint64_t> abandon();

  Stats stats() const;
  const HttpRewardOptions& options() const { return options_; }

 private:
  struct Impl;
  explicit HttpRewardClient(HttpRewardOptions options);

  HttpRewardOptions options_;
  std::unique_ptr<Impl> impl_;
};

// The reply to a request of `keys.size()` samples, checked against the protocol; the error says
// what is wrong ("2 rewards for 3 samples", "rewards[2] is NaN", "the reply is not JSON: ...").
Result<std::vector<RewardReply>> parse_reward_reply(std::string_view body, const std::vector<uint64_t>& keys);

}  // namespace rlrun::orchestrator
