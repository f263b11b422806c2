// gateway.h - the run's OpenAI endpoint for environments: sessions, routed to rollout workers.
//
// An environment runs an episode by calling POST {base_url}/chat/completions (or /completions) as
// often as it likes, where base_url = http://HOST:PORT/sessions/{token}/v1 names the episode's
// session (docs/environments.md). The HTTP and JSON side is orchestrator/openai's endpoint; this class
// is its Generator, and the rollout workers are the engine: each call becomes a GenerateRequest
// the orchestrator sends to a worker (take_calls), whose GenerateResult comes back through
// on_result(). A session:
//   - samples as the run does (temperature, top_p; greedy for an evaluation), whatever the
//     request asks, at most max_tokens per call and max_calls calls, one choice per call;
//   - is served by weights no older than its version (min_weight_version); the orchestrator ends a
//     session whose episode fell past the staleness bound, and its later calls get 409;
//   - records every finished call as a Turn (episode_record.h), its prompt made exact from the
//     previous turn's tokens where the text repeats them.
// Calls outside any session (/v1/...) are served by the current weights and recorded nowhere.
// Busy (more than max_queued calls waiting for a worker): 429, retry. Unknown session: 404.
//
// Threads: handle() and submit()/cancel() run on HTTP threads; everything else on the
// orchestrator's thread. Sinks are called on the orchestrator's thread, and on an HTTP thread
// for a call cancelled before it was sent.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/protocol/protocol.h"
#include "common/status.h"
#include "orchestrator/env/episode_record.h"
#include "orchestrator/openai/endpoint.h"
#include "orchestrator/openai/http_server.h"
#include "rollout/generator.h"

namespace rlrun::orchestrator {

struct GatewayOptions {
  std::string bind = "127.0.0.1:0";
  int http_threads = 64;
  double request_timeout_seconds = 300;
  int64_t max_calls = 32;       // per session
  int64_t max_queued = 4096;    // calls waiting for a worker
  uint64_t seed = 0;            // a session call's seed comes from it, the session and the call
};

struct SessionSampling {
  float temperature = 1.0f, top_p = 1.0f;  // 0: greedy
  int64_t max_tokens = 0;                  // per call; 0: up to max_model_len
  uint64_t seed = 0;                       // the calls' seeds come from it; 0: from the session's id
};

class EpisodeGateway : public rollout::Generator, public orchestrator::openai::HttpHandler {
 public:
  static constexpr uint64_t kRequestIdBit = uint64_t{1} << 62;  // a call's GenerateRequest ids

  // Listens on options.bind (errors name task.environment_gateway_bind).
  static Result<std::unique_ptr<EpisodeGateway>> start(GatewayOptions options, orchestrator::openai::ServedModel model);
  // Without an HTTP server (unit tests): sessions open and close, calls come only through handle(),
  // and address() is options.bind.
  static std::unique_ptr<EpisodeGateway> unserved(GatewayOptions options, orchestrator::openai::ServedModel model);
  ~EpisodeGateway() override;

  std::string address() const;  // host:port
  // ---- sessions (orchestrator thread)
  struct Opened {
    uint64_t id = 0;
    std::string base_url;  // http://host:port/sessions/<token>/v1
  };
  Opened open(uint64_t version, SessionSampling sampling);
  // Ends a session: later calls get 409, calls in flight are cancelled. Returns its turns.
  struct Closed {
    std::vector<Turn> turns;
    int64_t calls = 0;           // calls it made (served or not)
    int64_t spliced = 0;         // calls whose prompt ids were made exact from recorded tokens
    int64_t retokenized_differ = 0;  // of those, calls where encoding the text gave other ids
  };
  Closed close(uint64_t session);
  size_t open_sessions() const;
  // The run is ending: every session closes, every call not answered yet ends cancelled (no worker
  // answers them any more), and later calls get 503.
  void shut_down();

  // ---- calls (orchestrator thread)
  struct Call {
    uint64_t request_id = 0;
    GenerateRequest request;
  };
  // Calls to send (new, or requeued from a dead worker); report each one's worker with sent().
  std::vector<Call> take_calls();
  void sent(uint64_t request_id, int worker);
  // Calls to cancel, by worker (the client gave up, its session ended).
  std::map<int, std::vector<uint64_t>> take_cancels();
  int64_t calls_on(int worker) const;  // sent to it, not answered yet
  // A dead worker's calls go back to take_calls().
  void requeue_worker(int worker);
  // True when `result` answers a call (it is then delivered, and recorded in its session).
  bool on_result(const GenerateResult& result);
  static bool is_call(uint64_t request_id) { return (request_id & kRequestIdBit) != 0; }

  // ---- rollout::Generator (HTTP threads)
  Status submit(rollout::GenerationRequest request, std::shared_ptr<rollout::GenerationSink> sink) override;
  void cancel(uint64_t request_id) override;
  // ---- HttpHandler (HTTP threads)
  void handle(const orchestrator::openai::HttpRequest& request, orchestrator::openai::HttpResponder& out) override;
  size_t max_body_bytes() const override { return endpoint_->max_body_bytes(); }

 private:
  struct Session {
    std::string token;
    uint64_t version = 0;
    SessionSampling sampling;
    bool closed = false;
    int64_t calls = 0, spliced = 0, retokenized_differ = 0;
    std::vector<Turn> turns;
  };
  struct Pending {
    uint64_t session = 0;  // 0: none
    GenerateRequest request;
    std::vector<int32_t> prompt;
    bool stream = false;
    uint64_t endpoint_id = 0;
    int worker = -1;  // -1: not sent
    bool cancel_wanted = false, cancel_sent = false;
    std::shared_ptr<rollout::GenerationSink> sink;
  };
  EpisodeGateway(GatewayOptions options, orchestrator::openai::ServedModel model);
  std::vector<int32_t> exact_prompt(uint64_t session, std::vector<int32_t> ids);

  const GatewayOptions options_;
  std::unique_ptr<orchestrator::openai::OpenAiEndpoint> endpoint_;
  const engine::Tokenizer tokenizer_;
  std::unique_ptr<orchestrator::openai::HttpServer> server_;
  mutable std::mutex mu_;
  std::map<uint64_t, Session> sessions_;
  std::map<std::string, uint64_t> by_token_;  // 0: a session that ended (409), the last kRememberedEnded
  std::deque<std::string> ended_tokens_;
  static constexpr size_t kRememberedEnded = 4096;
  std::map<uint64_t, Pending> calls_;  // by GenerateRequest id
  std::deque<uint64_t> to_send_;
  uint64_t next_session_ = 1;
  bool shut_down_ = false;
};

}  // namespace rlrun::orchestrator
