// config.h - the run configuration: typed structs, loaded and validated in one place.
//
// A user writes one YAML file in the reference framework's vocabulary (flat top-level keys plus
// `model:` and `task:` sections). load_config() layers built-in defaults < the file < `--set`
// overrides, rejects unknown keys, wrong types, out-of-range values and inconsistent
// combinations, and reports EVERY error, one per line, each naming the file:line (or `--set`)
// and the key. Nothing else in rlrun reads YAML or environment variables for settings.
//
// Every key, its type, default, allowed values and comment are declared once, in
// common/config/keys.def; the members below are expanded from it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/observe/log.h"
#include "common/status.h"

namespace rlrun {

// ------------------------------------------------------------------------------ enum keys
// An enum key's YAML spellings are ConfigEnum<E>::kNames, '|'-separated, in declaration order.
template <class E>
struct ConfigEnum;

#define RLRUN_CONFIG_ENUM(E, names)                    \
  template <>                                          \
  struct ConfigEnum<E> {                               \
    static constexpr std::string_view kNames = names;  \
  }

enum class Placement { kPack, kSpread };
enum class LauncherKind { kAuto, kLocal, kSlurm };  // not orchestrator::Launcher, which starts processes
enum class BackendKind { kCpu, kCuda };  // not engine::Backend, which runs the ops
enum class ComputeDtype { kFp32, kBf16 };  // base_weights_dtype, and what compute_dtype comes to
enum class ComputeDtypeChoice { kAuto, kFp32, kBf16 };  // compute_dtype (orchestrator/roles/compute_backend.h)
enum class LrScheduler { kNone, kConstant, kLinear, kCosine };
enum class Algorithm { kGrpo, kDrGrpo, kRloo, kGspo };
enum class LossAggregation { kAuto, kSeqMeanTokenMean, kTokenMean, kSeqMeanTokenSumNorm };
enum class ClipRefLogprobs { kRollout, kBatch };  // denominator of the PPO ratio
enum class TisMode { kTruncate, kIcepop };
enum class KlEstimator { kK2, kK3 };
enum class KlReferenceOn { kTrainer, kRollout };  // which process scores the KL reference
enum class Architecture { kLlama, kQwen2, kQwen3, kGemma3 };
enum class TaskName { kArithmetic, kCountdown, kReverse, kSort, kJsonl };
enum class Subtraction { kNonNegative, kAny, kNegative };  // the sign of an arithmetic difference
enum class ControlPlaneSecurity { kCurve, kNone };
enum class CheckpointWriteFailure { kStop, kContinue };

RLRUN_CONFIG_ENUM(Placement, "PACK|SPREAD");
RLRUN_CONFIG_ENUM(LauncherKind, "auto|local|slurm");
RLRUN_CONFIG_ENUM(BackendKind, "cpu|cuda");
RLRUN_CONFIG_ENUM(ComputeDtype, "fp32|bf16");
RLRUN_CONFIG_ENUM(ComputeDtypeChoice, "auto|fp32|bf16");
RLRUN_CONFIG_ENUM(LrScheduler, "none|constant|linear|cosine");
RLRUN_CONFIG_ENUM(Algorithm, "grpo|dr_grpo|rloo|gspo");
RLRUN_CONFIG_ENUM(LossAggregation, "auto|seq_mean_token_mean|token_mean|seq_mean_token_sum_norm");
RLRUN_CONFIG_ENUM(ClipRefLogprobs, "rollout|batch");
RLRUN_CONFIG_ENUM(TisMode, "truncate|icepop");
RLRUN_CONFIG_ENUM(KlEstimator, "k2|k3");
RLRUN_CONFIG_ENUM(KlReferenceOn, "trainer|rollout");
RLRUN_CONFIG_ENUM(Architecture, "llama|qwen2|qwen3|gemma3");
RLRUN_CONFIG_ENUM(TaskName, "arithmetic|countdown|reverse|sort|jsonl");
RLRUN_CONFIG_ENUM(Subtraction, "non_negative|any|negative");
RLRUN_CONFIG_ENUM(ControlPlaneSecurity, "curve|none");
RLRUN_CONFIG_ENUM(CheckpointWriteFailure, "stop|continue");
RLRUN_CONFIG_ENUM(log::Level, "debug|info|warn|error");

// The i-th '|'-separated name of `names` ("" when out of range).
constexpr std::string_view nth_choice(std::string_view names, int i) {
  for (; i > 0; --i) {
    const size_t bar = names.find('|');
    if (bar == std::string_view::npos) return {};
    names.remove_prefix(bar + 1);
  }
  return names.substr(0, names.find('|'));
}

// The YAML spelling of an enum value: enum_name(Algorithm::kDrGrpo) == "dr_grpo".
template <class E>
constexpr std::string_view enum_name(E value) {
  return nth_choice(ConfigEnum<E>::kNames, static_cast<int>(value));
}

// ------------------------------------------------------------------------------ the structs
// `model:` - the decoder's shape and where its weights come from. With `checkpoint` set, the
// shape members are filled from the checkpoint's config.json, or from a .gguf checkpoint's
// metadata (setting them too is an error).
struct ModelSection {
#define RLRUN_MODEL_KEY(type, name, def, allowed, comment) type name = def;
#include "common/config/keys.def"
  bool operator==(const ModelSection&) const = default;
};

// `task:` - where prompts and rewards come from.
struct TaskSection {
#define RLRUN_TASK_KEY(type, name, def, allowed, comment) type name = def;
#include "common/config/keys.def"
  bool operator==(const TaskSection&) const = default;
};

// The whole configuration. A default-constructed Config holds every default.
struct Config {
#define RLRUN_KEY(type, name, def, allowed, comment) type name = def;
#include "common/config/keys.def"
  ModelSection model;
  TaskSection task;
  bool operator==(const Config&) const = default;  // every key equal
};

// ------------------------------------------------------------------------------ loading
// Loads `path` over the defaults, then applies `overrides` ("key=value" from `--set`; dotted keys
// for sections, `model.hidden_size=64`; the value is parsed as YAML), then checks every rule.
// Relative paths (model.checkpoint, task.dataset, run_dir, ...) written in the file are relative
// to the file's folder, those given with --set to the working directory; both come back absolute
// (a default stays as it is). On failure the Status (kInvalidArgument) message holds every error found,
// one per line, e.g. "run.yaml:12: unknown key `max_async_rollot` (did you mean
// `max_async_rollout`?)".
Result<Config> load_config(const std::string& path, const std::vector<std::string>& overrides);

// The same for YAML text; `source_name` stands for the file in messages.
Result<Config> load_config_text(std::string_view yaml, const std::string& source_name,
                                const std::vector<std::string>& overrides);

// model.checkpoint (an HF folder or a .gguf file) is read by the engine, the one reader of
// checkpoints (engine/io/model_io.h checkpoint_config_json; common must not depend on engine). The
// program registers it once at startup, before any load_config(): given the checkpoint's path, it
// returns the config.json text of the model it reads (the engine's verdict: a checkpoint the
// engine would compute wrongly is an error naming the field). Without one, a checkpoint is an
// error. Thread-safe.
using CheckpointReader = Result<std::string> (*)(const std::string& checkpoint);
void set_checkpoint_reader(CheckpointReader reader);

// ------------------------------------------------------------------------------ rendering
enum class RenderStyle {
  kPlain,      // key: value lines only (the effective config of `rlrun validate`, the run folder)
  kCommented,  // with group headings and each key's comment above it (configs/defaults.yaml)
};

// YAML that load_config() reads back to an equal Config: every key, top-level keys first,
// then `model:` and `task:`. With model.checkpoint set, the shape keys its config.json gives are
// written as comments (a config may not set them beside a checkpoint).
std::string render_config(const Config& config, RenderStyle style = RenderStyle::kPlain);

// render_config(config) with every path absolute (a relative default: against the working
// directory), proven by loading it back to an equal Config: what `rlrun validate` prints and what
// `rlrun CONFIG` writes into the run folder for its workers to read. An error
// (kInternal) says what a worker would refuse, so validate catches it before a run.
Result<std::string> render_effective_config(const Config& config);

// configs/defaults.yaml: a header plus render_config(Config{}, kCommented).
std::string render_defaults_yaml();
// docs/configuration.md: every key, grouped as keys.def groups them, with its type, default,
// allowed values and meaning (`rlrun validate --print-reference`).
std::string render_config_reference();

}  // namespace rlrun
