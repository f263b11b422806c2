// completion_call.h - one completion request in flight (endpoint.cc's helper): its choices
// submitted to the Generator, their tokens taken as they arrive on the engine thread, and the
// answer sent on the request's HTTP thread, whole or as a stream of SSE chunks.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "orchestrator/openai/api_response.h"
#include "orchestrator/openai/endpoint.h"
#include "orchestrator/openai/http_server.h"
#include "rollout/generator.h"

namespace rlrun::orchestrator::openai {

struct CallSpec {
  const ServedModel* model = nullptr;
  CompletionParams params;
  std::vector<std::vector<int32_t>> prompts;  // token ids, one per prompt (chat: one)
  int64_t max_tokens = 0;                     // per choice; 0: up to max_model_len
  ResponseHead head;
  uint64_t first_request_id = 0;              // choice c is rollout::GenerationRequest first_request_id + c
  uint64_t tag = 0;                           // rollout::GenerationRequest::tag of every choice
  std::chrono::steady_clock::time_point deadline;
};

// Runs the request to its end and answers on `out` (errors included). Blocks the calling thread.
void run_completion_call(const CallSpec& spec, rollout::Generator& generator, HttpResponder& out);

}  // namespace rlrun::orchestrator::openai
