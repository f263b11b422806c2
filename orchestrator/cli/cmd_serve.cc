// `rlrun serve`: an OpenAI-compatible server for one checkpoint (HF folder or .gguf) on this
// machine. The pieces: the model and its tokenizer (engine/io/model_io.h, as `rlrun generate`),
// the chat template (data/prompt_format.h), a Scheduler driven by an EngineLoop thread
// (continuous batching over the paged KV cache), and the HTTP endpoint (orchestrator/openai/). This
// file parses flags, wires them and waits for SIGINT/SIGTERM.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "common/observe/log.h"
#include "common/observe/metrics.h"
#include "engine/backend.h"
#include "engine/io/gguf_model.h"
#include "engine/io/model_io.h"
#include "orchestrator/cli/cli_args.h"
#include "orchestrator/data/prompt_format.h"
#include "orchestrator/openai/endpoint.h"
#include "orchestrator/openai/http_server.h"
#include "rollout/engine_loop.h"
#include "rollout/generate.h"
#include "rollout/scheduler.h"

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;

// The KV cache without --kv-cache-mb: room for max_num_seqs sequences of max_model_len, but no more
// than this (the paged cache preempts when sequences outgrow it), so a default start stays small.
constexpr int64_t kDefaultKvCacheMb = 512;

struct ServeFlags {
  std::string checkpoint;
  std::string bind = "127.0.0.1:8000";
  std::string model_name;          // "" = the checkpoint's file or folder name
  std::string chat_template = "auto";
  std::string device = "cpu";
  int threads = 0;                 // CPU compute threads, 0 = every core
  rollout::SchedulerOptions scheduler;
  int64_t kv_cache_mb = 0;         // 0: max_num_seqs sequences of max_model_len, at most kDefaultKvCacheMb
  int http_threads = 64;
  double request_timeout_seconds = 600;
};

Result<ServeFlags> parse_flags(const Args& args) {
  static constexpr FlagSpec kFlags[] = {
      {"--checkpoint", true},   {"--bind", true},          {"--model-name", true},        {"--chat-template", true},
      {"--device", true},       {"--threads", true},       {"--max-num-seqs", true},      {"--max-model-len", true},
      {"--kv-cache-mb", true},  {"--http-threads", true},  {"--request-timeout", true}};
  RLRUN_ASSIGN_OR_RETURN(ConfigArgs a, parse_config_args(args, kFlags));
  if (!a.config_path.empty()) return invalid_argument(str("unexpected argument `", a.config_path, "`; see --help"));
  if (!a.overrides.empty()) return invalid_argument("serve takes no --set; see --help");
  ServeFlags f;
  f.checkpoint = a.value("--checkpoint");
  if (f.checkpoint.empty()) return invalid_argument("missing --checkpoint DIR (an HF model folder, or a .gguf file)");
  f.bind = a.value("--bind", f.bind);
  std::string host;
  int port = 0;
  RLRUN_RETURN_IF_ERROR(parse_listen_address("--bind", f.bind, &host, &port));  // before the model loads
  f.model_name = a.value("--model-name");
  f.chat_template = a.value("--chat-template", f.chat_template);
  f.device = a.value("--device", f.device);
  RLRUN_ASSIGN_OR_RETURN(const int64_t threads, a.integer("--threads", 0, 0, 4096));
  RLRUN_ASSIGN_OR_RETURN(f.scheduler.max_num_seqs, a.integer("--max-num-seqs", 16, 1, 4096));
  RLRUN_ASSIGN_OR_RETURN(f.scheduler.max_model_len, a.integer("--max-model-len", 0, 0, int64_t{1} << 24));
  RLRUN_ASSIGN_OR_RETURN(f.kv_cache_mb, a.integer("--kv-cache-mb", 0, 0, int64_t{1} << 24));
  RLRUN_ASSIGN_OR_RETURN(const int64_t http_threads, a.integer("--http-threads", 64, 1, 4096));
  RLRUN_ASSIGN_OR_RETURN(const int64_t timeout, a.integer("--request-timeout", 600, 1, 86400));
  f.threads = static_cast<int>(threads);
  f.http_threads = static_cast<int>(http_threads);
  f.request_timeout_seconds = static_cast<double>(timeout);
  return f;
}

// The text side of the model: tokenizer, chat template, stop tokens, limits.
Result<orchestrator::openai::ServedModel> served_model(const ServeFlags& f, const engine::ModelConfig& config) {
  const std::string tokenizer_path = engine::checkpoint_tokenizer_path(f.checkpoint);
  if (!fs::exists(tokenizer_path))
    return not_found(str(tokenizer_path, " does not exist: serving text needs the checkpoint's tokenizer"));
  RLRUN_ASSIGN_OR_RETURN(engine::Tokenizer tokenizer, engine::load_tokenizer_file(tokenizer_path));
  RLRUN_ASSIGN_OR_RETURN(PromptFormat format, PromptFormat::create(f.chat_template, tokenizer_path, tokenizer));
  std::string id = f.model_name.empty() ? fs::path(f.checkpoint).filename().replace_extension().string() : f.model_name;
  if (id.empty()) id = fs::path(f.checkpoint).parent_path().filename().string();  // "DIR/"
  orchestrator::openai::ServedModel m(id, tokenizer);
  m.stop_ids = rollout::stop_token_ids(config, &tokenizer, format.end_of_turn());
  if (format.is_chat()) m.render_chat = [format](const nlohmann::ordered_json& messages) { return format.chat_text(messages); };
  m.max_model_len = f.scheduler.max_model_len;
  m.vocab_size = static_cast<int32_t>(config.vocab_size);
  log::info(str("prompts: ", format.description(), "; stop token ids: ", m.stop_ids.size()));
  return m;
}

// Everything that serves, in construction order (destroyed in reverse).
struct Server {
  std::unique_ptr<engine::Backend> backend;
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<rollout::Scheduler> scheduler;
  std::unique_ptr<rollout::EngineLoop> loop;
  std::unique_ptr<orchestrator::openai::OpenAiEndpoint> endpoint;
  std::unique_ptr<orchestrator::openai::HttpServer> http;
};

Status start(ServeFlags& f, Server* s) {
  if (engine::is_gguf_path(f.checkpoint) ? !fs::is_regular_file(f.checkpoint) : !fs::is_directory(f.checkpoint))
    return not_found(str("--checkpoint ", f.checkpoint, " is not a directory (or a .gguf file)"));
  RLRUN_ASSIGN_OR_RETURN(const engine::ModelConfig config, engine::read_checkpoint_config(f.checkpoint));
  if (f.scheduler.max_model_len == 0) f.scheduler.max_model_len = std::min<int64_t>(config.max_position, 2048);
  if (f.scheduler.max_model_len > config.max_position)
    return invalid_argument(str("--max-model-len ", f.scheduler.max_model_len, " exceeds the model's max_position ", config.max_position));
  RLRUN_ASSIGN_OR_RETURN(orchestrator::openai::ServedModel served, served_model(f, config));
  RLRUN_ASSIGN_OR_RETURN(s->backend, engine::create_backend(f.device, f.threads));
  RLRUN_ASSIGN_OR_RETURN(s->model, engine::load_model(*s->backend, f.checkpoint));
  f.scheduler.kv_num_blocks =
      f.kv_cache_mb > 0 ? rollout::kv_blocks_for_budget(*s->model, f.scheduler, f.kv_cache_mb << 20)
                        : std::min(rollout::kv_blocks_for_budget(*s->model, f.scheduler, 0),
                                   rollout::kv_blocks_for_budget(*s->model, f.scheduler, kDefaultKvCacheMb << 20));
  RLRUN_ASSIGN_OR_RETURN(s->scheduler, rollout::Scheduler::create(*s->model, f.scheduler));
  s->loop = std::make_unique<rollout::EngineLoop>(*s->scheduler, rollout::EngineLoopOptions{});
  orchestrator::openai::EndpointOptions options;
  options.request_timeout_seconds = f.request_timeout_seconds;
  const std::string id = served.id;
  s->endpoint = std::make_unique<orchestrator::openai::OpenAiEndpoint>(std::move(served), *s->loop, options);
  orchestrator::openai::HttpServerOptions http;
  http.bind = f.bind;
  http.threads = f.http_threads;
  RLRUN_ASSIGN_OR_RETURN(s->http, orchestrator::openai::HttpServer::start(http, *s->endpoint));
  log::info(str("serving `", id, "` (max_model_len ", f.scheduler.max_model_len, ", max_num_seqs ", f.scheduler.max_num_seqs,
                ", KV cache ", f.scheduler.kv_num_blocks, " blocks of ", f.scheduler.kv_block_size,
                " tokens) on http://", s->http->address(), "/v1"));
  return {};
}

}  // namespace

int cmd_serve(const Args& args) {
  Result<ServeFlags> flags = parse_flags(args);
  if (!flags.ok()) return report_usage_error("serve", flags.status());
  // SIGINT/SIGTERM are taken by sigwait below: blocked before any thread starts, so every thread
  // (HTTP, engine, OpenMP) inherits the mask and none of them is interrupted.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  Server server;
  if (Status s = start(*flags, &server); !s.ok()) {
    std::fprintf(stderr, "rlrun serve: %s\n", s.message().c_str());
    return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ? kExitUsage : kExitFailed;
  }
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  log::info(str("stopping (", signal_number == SIGINT ? "SIGINT" : "SIGTERM", "): requests in flight are cancelled"));
  server.loop->stop();  // in-flight requests end with 503 at once, so the HTTP threads can finish
  server.http.reset();
  const rollout::EngineLoopStats stats = server.loop->stats();
  log::info(str("served ", stats.requests, " generation requests (one per choice), ", stats.scheduler.tokens_generated,
                " tokens in ", stats.scheduler.steps, " engine steps; at most ", stats.scheduler.max_running,
                " sequences in one batch"));
  return kExitOk;
}

}  // namespace rlrun::orchestrator
