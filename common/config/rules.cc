// Cross-field rules: combinations of individually valid values that cannot work together.
// Each message names every key involved and what to change; it is reported at the origin of
// the first involved key the user set (file:line or --set).
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <initializer_list>

#include "common/config/load.h"
#include "common/config/reward_expr.h"

namespace rlrun {
namespace {

namespace fs = std::filesystem;

class Rules {
 public:
  explicit Rules(ConfigLoad& load) : load_(load), c_(load.config) {}

  const Config& config() const { return c_; }

  // Reports `message` unless one of `keys` had its value rejected (the config then holds a value
  // the user did not write, and the primary error already says what is wrong).
  void fail(std::initializer_list<std::string_view> keys, const std::string& message) {
    std::string where;
    for (std::string_view k : keys) {
      if (load_.rejected.count(std::string(k)) != 0) return;
      if (where.empty()) where = load_.origin(std::string(k));
    }
    load_.error(where.empty() ? "config" : where, message);
  }

  // A path key that must name an existing regular file when set.
  void file_exists(std::string_view key, const std::string& path) {
    if (path.empty()) return;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      fail({key}, str("`", key, "` = `", path, "` is not an existing file (a relative path in a config ",
                      "file is relative to that file's folder; with --set, to the working directory)"));
    }
  }

 private:
  ConfigLoad& load_;
  const Config& c_;
};

void check_parallelism(Rules& r) {
  const Config& c = r.config();
  if (c.inference_num_workers % c.inference_tensor_parallel_size != 0) {
    r.fail({"inference_num_workers", "inference_tensor_parallel_size"},
           str("`inference_num_workers` (", c.inference_num_workers,
               ") is not divisible by `inference_tensor_parallel_size` (",
               c.inference_tensor_parallel_size, "): every rollout server needs that many workers"));
  }
  if (c.prompts_batch_size_for_trainer % c.number_of_minibatches != 0) {
    r.fail({"prompts_batch_size_for_trainer", "number_of_minibatches"},
           str("`prompts_batch_size_for_trainer` (", c.prompts_batch_size_for_trainer,
               ") is not divisible by `number_of_minibatches` (", c.number_of_minibatches,
               "): each minibatch takes the same number of groups"));
  }
}

void check_lengths(Rules& r) {
  const Config& c = r.config();
  const int64_t sequence = c.max_prompt_tokens + c.max_tokens;
  if (sequence > c.max_model_len) {
    r.fail({"max_tokens", "max_prompt_tokens", "max_model_len"},
           str("`max_prompt_tokens` + `max_tokens` (", c.max_prompt_tokens, " + ", c.max_tokens,
               " = ", sequence, ") exceeds `max_model_len` (", c.max_model_len,
               "): raise max_model_len or lower max_tokens"));
  }
  if (sequence > c.seq_len) {
    r.fail({"max_tokens", "max_prompt_tokens", "seq_len"},
           str("`max_prompt_tokens` + `max_tokens` (", sequence, ") exceeds `seq_len` (",
               c.seq_len, "): a sequence is never split across packed rows; raise seq_len"));
  }
  if (c.max_model_len > c.model.max_position) {
    r.fail({"max_model_len", "model.max_position"},
           str("`max_model_len` (", c.max_model_len, ") exceeds `model.max_position` (",
               c.model.max_position, "), the longest position the model supports"));
  }
  if (c.seq_len % c.pad_to_multiple_of != 0) {
    r.fail({"seq_len", "pad_to_multiple_of"},
           str("`seq_len` (", c.seq_len, ") is not a multiple of `pad_to_multiple_of` (",
               c.pad_to_multiple_of, ")"));
  }
}

void check_optimization(Rules& r) {
  const Config& c = r.config();
  if (c.use_tis && c.ppo_clip_ref_logprobs == ClipRefLogprobs::kRollout) {
    r.fail({"use_tis", "ppo_clip_ref_logprobs"},
           "`use_tis: true` with `ppo_clip_ref_logprobs: rollout` counts the importance "
           "correction twice; use ppo_clip_ref_logprobs: batch or use_tis: false");
  }
  if (c.clip_ratio_c != 0.0 && c.clip_ratio_c <= 1.0) {
    r.fail({"clip_ratio_c"}, str("`clip_ratio_c` = ", c.clip_ratio_c,
                                 " must be > 1 (the dual-clip bound) or 0 (off)"));
  }
  const int64_t optimizer_steps = c.number_of_steps * c.number_of_minibatches;
  if (c.warmup_steps > optimizer_steps) {
    r.fail({"warmup_steps", "number_of_steps", "number_of_minibatches"},
           str("`warmup_steps` (", c.warmup_steps, ") exceeds the run's optimizer steps, ",
               "`number_of_steps` x `number_of_minibatches` = ", optimizer_steps));
  }
  if (c.lr_scheduler == LrScheduler::kNone && c.warmup_steps > 0) {
    r.fail({"warmup_steps", "lr_scheduler"},
           "`warmup_steps` > 0 with `lr_scheduler: none` (a fixed learning rate, no warm-up); "
           "use lr_scheduler: constant for warm-up then a constant rate");
  }
}

// LoRA runs what is implemented so far: f32 adapters on the CPU backend, the KL reference on the
// trainer (the base with the policy's adapters as they were at the first RL update).
void check_lora(Rules& r) {
  const Config& c = r.config();
  if (c.lora_rank == 0) return;
  if (c.backend != BackendKind::kCpu) {
    r.fail({"lora_rank", "backend"}, "`lora_rank` > 0 needs `backend: cpu` for now (backend cuda computes in bf16 and "
                                     "the adapters are f32); set lora_rank: 0 for full fine-tuning on cuda");
  }
  if (c.kl_coef > 0 && c.kl_reference_on == KlReferenceOn::kRollout) {
    r.fail({"lora_rank", "kl_reference_on"}, "`lora_rank` > 0 with `kl_reference_on: rollout` is not implemented "
                                             "(the rollout's reference copies full weights); use kl_reference_on: trainer");
  }
  if (c.lora_target_modules.empty()) {
    r.fail({"lora_target_modules"}, "`lora_target_modules` is empty; use all-linear or a list such as q_proj,v_proj");
  }
}

// base_weights_dtype: bf16 is the CPU backend's storage (the CPU feature check is the workers':
// orchestrator/roles/compute_backend.h).
void check_base_weights_dtype(Rules& r) {
  const Config& c = r.config();
  if (c.base_weights_dtype == ComputeDtype::kBf16 && c.backend != BackendKind::kCpu) {
    r.fail({"base_weights_dtype", "backend"}, "`base_weights_dtype: bf16` is for backend cpu (backend cuda already "
                                              "keeps its compute weights in bf16); set base_weights_dtype: fp32");
  }
}

void check_model(Rules& r) {
  const ModelSection& m = r.config().model;
  r.file_exists("model.tokenizer", m.tokenizer);
  // A checkpoint's shape was checked by the engine's reader (its head_dim need not be
  // hidden_size / num_heads); the rules below are for a shape written in the config.
  if (!m.checkpoint.empty()) return;
  if (m.hidden_size % m.num_heads != 0) {
    r.fail({"model.hidden_size", "model.num_heads"},
           str("`model.hidden_size` (", m.hidden_size, ") is not divisible by `model.num_heads` (",
               m.num_heads, ")"));
  } else if ((m.hidden_size / m.num_heads) % 2 != 0) {
    r.fail({"model.hidden_size", "model.num_heads"},
           str("`model.hidden_size` / `model.num_heads` = ", m.hidden_size / m.num_heads,
               " is odd; RoPE rotates pairs of dimensions, so the head size must be even"));
  }
  if (m.num_heads % m.num_kv_heads != 0) {
    r.fail({"model.num_heads", "model.num_kv_heads"},
           str("`model.num_heads` (", m.num_heads, ") is not divisible by `model.num_kv_heads` (",
               m.num_kv_heads, "): each key/value head serves a whole group of query heads"));
  }
  if (m.architecture == Architecture::kQwen2 && !m.qkv_bias) {
    r.fail({"model.architecture", "model.qkv_bias"},
           "`model.architecture: qwen2` has q/k/v biases: set `model.qkv_bias: true` too");
  }
  if ((m.architecture == Architecture::kQwen3 || m.architecture == Architecture::kGemma3) && m.qkv_bias) {
    r.fail({"model.architecture", "model.qkv_bias"},
           str("`model.architecture: ", enum_name(m.architecture), "` has no q/k/v biases: remove `model.qkv_bias`"));
  }
}

// task.reward and the keys its terms need.
void check_reward(Rules& r) {
  const TaskSection& t = r.config().task;
  const Result<RewardExpression> expr = parse_reward_expression(t.reward);
  if (!expr.ok()) {
    r.fail({"task.reward"}, expr.status().message());
    return;
  }
  const auto needs = [&](RewardTerm term, const char* key, const std::string& value, const char* example) {
    if (expr->has(term) && value.empty())
      r.fail({"task.reward", key}, str("task.reward uses the term `", reward_term_name(term), "`, which needs `",
                                       key, "` (e.g. ", example, ")"));
    if (!expr->has(term) && !value.empty())
      r.fail({key, "task.reward"}, str("`", key, "` is only read by the term `", reward_term_name(term),
                                       "`, which task.reward (\"", t.reward, "\") does not use"));
  };
  needs(RewardTerm::kHttp, "task.reward_url", t.reward_url, "http://127.0.0.1:8000/reward");
  static constexpr std::string_view kAccuracy[] = {"auto", "task", "exact", "numeric", "regex"};
  if (std::find(std::begin(kAccuracy), std::end(kAccuracy), t.accuracy) == std::end(kAccuracy))
    r.fail({"task.accuracy"}, str("`task.accuracy` \"", t.accuracy, "\" is not one of auto, task, exact, numeric, regex"));
  if (t.accuracy == "regex" && t.reward_regex.empty())
    r.fail({"task.accuracy", "task.reward_regex"}, "`task.accuracy: regex` needs `task.reward_regex`");
  if (t.accuracy != "regex") needs(RewardTerm::kRegex, "task.reward_regex", t.reward_regex, "\"answer is {answer}\"");
  needs(RewardTerm::kFormat, "task.format_regex", t.format_regex, "\"####\\\\s*-?[0-9]\"");
  if (!t.reward_url.empty() && t.reward_url.rfind("http://", 0) != 0 && t.reward_url.rfind("https://", 0) != 0)
    r.fail({"task.reward_url"}, str("`task.reward_url` \"", t.reward_url, "\" is not an http:// or https:// URL"));
  const std::string& env = t.environment_url;
  if (!env.empty() && env.rfind("http://", 0) != 0 && env.rfind("https://", 0) != 0)
    r.fail({"task.environment_url"}, str("`task.environment_url` \"", env, "\" is not an http:// or https:// URL"));
  if (env.empty() && !t.environment_field.empty())
    r.fail({"task.environment_field", "task.environment_url"},
           "`task.environment_field` chooses which rows an environment runs, but `task.environment_url` is empty");
}

void check_task(Rules& r) {
  const TaskSection& t = r.config().task;
  if (t.name == TaskName::kJsonl && t.dataset.empty()) {
    r.fail({"task.name", "task.dataset"},
           "`task.name: jsonl` needs `task.dataset`, the JSONL file of prompts");
  }
  if (t.name != TaskName::kJsonl && !t.dataset.empty()) {
    r.fail({"task.dataset", "task.name"},
           str("`task.dataset` is only read when `task.name` is jsonl, but it is ",
               enum_name(t.name), "; remove task.dataset or set task.name: jsonl"));
  }
  r.file_exists("task.dataset", t.dataset);
  r.file_exists("task.eval_dataset", t.eval_dataset);
  if (t.chat_template != "auto" && t.chat_template != "none") r.file_exists("task.chat_template", t.chat_template);
  if (t.name == TaskName::kJsonl && r.config().format_warm_start_steps > 0) {
    r.fail({"format_warm_start_steps", "task.name"},
           "`format_warm_start_steps` needs a built-in task (it draws format-only answers from the task's "
           "generator); a jsonl dataset has none: set format_warm_start_steps: 0");
  }
  if (t.partial_credit && t.name != TaskName::kReverse && t.name != TaskName::kSort) {
    r.fail({"task.partial_credit", "task.name"},
           str("`task.partial_credit` scores characters of reverse and sort answers, but task.name is ",
               enum_name(t.name), "; remove task.partial_credit"));
  }
  check_reward(r);
  if (t.operations.empty() || t.operations.find_first_not_of("+-*") != std::string::npos)
    r.fail({"task.operations"}, str("`task.operations` \"", t.operations, "\" must be one or more of + - *"));
  if (t.question_format.find("{a}") == std::string::npos || t.question_format.find("{b}") == std::string::npos)
    r.fail({"task.question_format"},
           str("`task.question_format` \"", t.question_format, "\" must contain {a} and {b} (the operands)"));
  if (t.min_digits > t.max_digits) {
    r.fail({"task.min_digits", "task.max_digits"},
           str("`task.min_digits` (", t.min_digits, ") exceeds `task.max_digits` (", t.max_digits,
               ")"));
  }
  if (t.min_length > t.max_length) {
    r.fail({"task.min_length", "task.max_length"},
           str("`task.min_length` (", t.min_length, ") exceeds `task.max_length` (", t.max_length,
               ")"));
  }
}

// HOST:PORT, HOST a name or address ([...] for IPv6), PORT in [0, 65535].
bool valid_bind(const std::string& bind) {
  const size_t colon = bind.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  const std::string host = bind.substr(0, colon), port = bind.substr(colon + 1);
  if (host.find_first_of(" \t/") != std::string::npos) return false;
  if (host.front() == '[' ? host.back() != ']' : host.find(':') != std::string::npos) {
    return false;
  }
  int value = -1;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  return !port.empty() && ec == std::errc() && end == port.data() + port.size() && value >= 0 &&
         value <= 65535;
}

void check_runtime(Rules& r) {
  const Config& c = r.config();
  if (c.heartbeat_timeout_seconds <= c.heartbeat_interval_seconds) {
    r.fail({"heartbeat_timeout_seconds", "heartbeat_interval_seconds"},
           str("`heartbeat_timeout_seconds` (", c.heartbeat_timeout_seconds,
               ") must exceed `heartbeat_interval_seconds` (", c.heartbeat_interval_seconds,
               "), or every worker is declared dead between two heartbeats"));
  }
  if (!valid_bind(c.metrics_bind)) {
    r.fail({"metrics_bind"}, str("`metrics_bind` = `", c.metrics_bind,
                                 "` is not HOST:PORT with PORT in [0, 65535], e.g. 127.0.0.1:9400"));
  }
  if (c.run_dir.empty()) r.fail({"run_dir"}, "`run_dir` is empty; name a folder for the run");
}

}  // namespace

void check_config_rules(ConfigLoad& load) {
  Rules rules(load);
  check_parallelism(rules);
  check_lengths(rules);
  check_optimization(rules);
  check_lora(rules);
  check_base_weights_dtype(rules);
  check_model(rules);
  check_task(rules);
  check_runtime(rules);
}

}  // namespace rlrun
