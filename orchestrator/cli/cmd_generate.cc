// `rlrun generate`: one completion from an HF checkpoint folder or a .gguf file, through the same engine path
// rollout workers use (KV-cache prefill + decode, rollout/sampler.h). The work lives in
// engine/io/model_io.h and rollout/generate.h; this file parses flags and prints.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/observe/log.h"
#include "engine/backend.h"
#include "engine/io/gguf_model.h"
#include "engine/io/model_io.h"
#include "engine/tokenizer/tokenizer.h"
#include "orchestrator/cli/cli_args.h"
#include "orchestrator/data/prompt_format.h"
#include "rollout/generate.h"

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;

struct GenerateRequest {
  std::string checkpoint;
  std::optional<std::string> prompt;    // --prompt TEXT
  bool chat = false;                    // --chat: the prompt is one user message in the template
  std::vector<int32_t> prompt_ids;      // --prompt-ids, or the encoded --prompt
  rollout::GenerateOptions options;
  bool json = false;
  int threads = 0;
};

// A whole-string number of type T (int64_t or float), else an error naming the flag.
template <typename T>
Result<T> parse_number(const std::string& flag, const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return invalid_argument(str("`", flag, " ", text, "`: expected a number"));
  }
  return value;
}

Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, comma - begin);
    Result<int64_t> id = parse_number<int64_t>("--prompt-ids", item);
    if (!id.ok() || *id < 0 || *id > INT32_MAX) {
      return invalid_argument(str("--prompt-ids: `", item, "` is not a token id; expected comma-separated "
                                  "non-negative integers, e.g. --prompt-ids 1,2,3"));
    }
    ids.push_back(static_cast<int32_t>(*id));
    begin = comma + 1;
  }
  return ids;
}

Result<GenerateRequest> parse_request(const Args& args) {
  static constexpr FlagSpec kFlags[] = {{"--checkpoint", true}, {"--prompt", true},      {"--prompt-ids", true},
                                        {"--max-tokens", true}, {"--temperature", true}, {"--top-p", true},
                                        {"--seed", true},       {"--json", false},       {"--threads", true},
                                        {"--chat", false}};
  RLRUN_ASSIGN_OR_RETURN(ConfigArgs a, parse_config_args(args, kFlags));
  if (!a.config_path.empty()) return invalid_argument(str("unexpected argument `", a.config_path, "`; see --help"));
  if (!a.overrides.empty()) return invalid_argument("generate takes no --set; see --help");
  GenerateRequest r;
  r.checkpoint = a.value("--checkpoint");
  if (r.checkpoint.empty()) return invalid_argument("missing --checkpoint DIR (an HF model folder, or a .gguf file)");
  if (a.has("--prompt") == a.has("--prompt-ids")) return invalid_argument("give exactly one of --prompt TEXT and --prompt-ids IDS");
  if (a.has("--prompt")) r.prompt = a.value("--prompt");
  r.chat = a.has("--chat");
  if (r.chat && !r.prompt) return invalid_argument("--chat needs --prompt TEXT (the user message)");
  if (a.has("--prompt-ids")) {
    RLRUN_ASSIGN_OR_RETURN(r.prompt_ids, parse_ids(a.value("--prompt-ids")));
  }
  RLRUN_ASSIGN_OR_RETURN(r.options.max_tokens, parse_number<int64_t>("--max-tokens", a.value("--max-tokens", "64")));
  RLRUN_ASSIGN_OR_RETURN(r.options.sampling.temperature, parse_number<float>("--temperature", a.value("--temperature", "1")));
  RLRUN_ASSIGN_OR_RETURN(r.options.sampling.top_p, parse_number<float>("--top-p", a.value("--top-p", "1")));
  RLRUN_ASSIGN_OR_RETURN(int64_t seed, parse_number<int64_t>("--seed", a.value("--seed", "0")));
  RLRUN_ASSIGN_OR_RETURN(int64_t threads, parse_number<int64_t>("--threads", a.value("--threads", "1")));
  if (r.options.max_tokens < 1) return invalid_argument("--max-tokens must be >= 1");
  if (!(r.options.sampling.temperature >= 0)) return invalid_argument("--temperature must be >= 0 (0 = greedy)");
  if (!(r.options.sampling.top_p > 0 && r.options.sampling.top_p <= 1)) return invalid_argument("--top-p must be in (0, 1]");
  if (seed < 0) return invalid_argument("--seed must be >= 0");
  if (threads < 0 || threads > 4096) return invalid_argument("--threads must be in [0, 4096] (0 = every core)");
  r.options.seed = static_cast<uint64_t>(seed);
  r.threads = static_cast<int>(threads);
  r.json = a.has("--json");
  return r;
}

fs::path tokenizer_path(const GenerateRequest& r) { return engine::checkpoint_tokenizer_path(r.checkpoint); }

// The tokenizer when DIR has one, or the .gguf file's (needed for --prompt and to print text).
Result<std::optional<engine::Tokenizer>> load_tokenizer(const GenerateRequest& r) {
  const fs::path path = tokenizer_path(r);
  if (!fs::exists(path)) {
    if (r.prompt) return invalid_argument(str("--prompt needs ", path.string(), "; give --prompt-ids instead"));
    return std::optional<engine::Tokenizer>();
  }
  RLRUN_ASSIGN_OR_RETURN(engine::Tokenizer tokenizer, engine::load_tokenizer_file(path.string()));
  return std::optional<engine::Tokenizer>(std::move(tokenizer));
}

void print_result(const GenerateRequest& r, const rollout::Generation& g,
                  const std::optional<engine::Tokenizer>& tokenizer) {
  std::optional<std::string> text;
  if (tokenizer) {
    engine::DecodeOptions decode;
    decode.skip_special_tokens = true;  // the stop token (<|im_end|>) is in ids, not in the text
    if (Result<std::string> t = tokenizer->decode(g.ids, decode); t.ok()) text = *t;
  }
  if (!r.json) {
    if (text) {
      std::printf("%s\n", text->c_str());
    } else {
      for (size_t i = 0; i < g.ids.size(); ++i) std::printf("%s%d", i ? "," : "", g.ids[i]);
      std::printf("\n");
    }
    return;
  }
  nlohmann::json j;
  j["prompt_ids"] = r.prompt_ids;
  j["ids"] = g.ids;
  j["logprobs"] = g.logprobs;
  j["text"] = text ? nlohmann::json(*text) : nlohmann::json(nullptr);
  j["finish_reason"] = rollout::finish_reason_name(g.finish_reason);
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

}  // namespace

int cmd_generate(const Args& args) {
  Result<GenerateRequest> req = parse_request(args);
  if (!req.ok()) return report_usage_error("generate", req.status());
  GenerateRequest& r = *req;
  if (engine::is_gguf_path(r.checkpoint) ? !fs::is_regular_file(r.checkpoint) : !fs::is_directory(r.checkpoint)) {
    return report_usage_error("generate", not_found(str("--checkpoint ", r.checkpoint, " is not a directory (or a .gguf file)")));
  }
  Result<engine::ModelConfig> config = engine::read_checkpoint_config(r.checkpoint);
  if (!config.ok()) return report_usage_error("generate", config.status());
  Result<std::optional<engine::Tokenizer>> tokenizer = load_tokenizer(r);
  if (!tokenizer.ok()) return report_usage_error("generate", tokenizer.status());
  std::optional<int32_t> end_of_turn;
  if (r.prompt && r.chat) {
    Result<PromptFormat> format = PromptFormat::create("auto", tokenizer_path(r).string(), **tokenizer);
    if (!format.ok()) return report_usage_error("generate", format.status());
    if (!format->is_chat())
      return report_usage_error("generate", invalid_argument(str("--chat: ", r.checkpoint, " has no chat template ",
                                                                 "(tokenizer_config.json `chat_template`, chat_template.jinja, ",
                                                                 "or a .gguf's tokenizer.chat_template)")));
    Result<std::vector<int32_t>> ids = format->ids(*r.prompt);
    if (!ids.ok()) return report_usage_error("generate", ids.status());
    r.prompt_ids = std::move(*ids);
    end_of_turn = format->end_of_turn();
  } else if (r.prompt) {
    r.prompt_ids = (*tokenizer)->encode(*r.prompt);
  }
  if (r.prompt_ids.empty()) return report_usage_error("generate", invalid_argument("the prompt encodes to no tokens"));
  for (int32_t id : r.prompt_ids) {
    if (id >= config->vocab_size) {
      return report_usage_error("generate", invalid_argument(str("--prompt-ids: id ", id, " is outside the vocabulary [0, ",
                                                                 config->vocab_size, ") of ", r.checkpoint)));
    }
  }
  r.options.stop_ids = rollout::stop_token_ids(*config, tokenizer->has_value() ? &**tokenizer : nullptr, end_of_turn);

  Result<std::unique_ptr<engine::Backend>> backend = engine::create_backend("cpu", r.threads);
  if (!backend.ok()) return report_usage_error("generate", backend.status());
  Result<std::unique_ptr<engine::Model>> model = engine::load_model(**backend, r.checkpoint);
  if (!model.ok()) return report_usage_error("generate", model.status());
  const auto start = std::chrono::steady_clock::now();
  Result<rollout::Generation> g = rollout::generate(**model, r.prompt_ids, r.options);
  if (!g.ok()) {
    std::fprintf(stderr, "rlrun generate: %s\n", g.status().message().c_str());
    return g.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  print_result(r, *g, *tokenizer);
  std::fprintf(stderr, "rlrun generate: %zu prompt + %zu new tokens in %.2f s (%.1f tokens/s), finish: %s\n",
               r.prompt_ids.size(), g->ids.size(), seconds, g->ids.size() / seconds,
               rollout::finish_reason_name(g->finish_reason));
  return kExitOk;
}

}  // namespace rlrun::orchestrator
