#include "orchestrator/cli/commands.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/config/config.h"
#include "common/observe/log.h"
#include "engine/io/model_io.h"

namespace rlrun::orchestrator {

int cmd_version(const Args& args);
int cmd_validate(const Args& args);
int cmd_run(const Args& args);
int cmd_trainer(const Args& args);
int cmd_generate(const Args& args);
int cmd_serve(const Args& args);
int cmd_convert(const Args& args);
int cmd_rollout(const Args& args);
int cmd_plan(const Args& args);
int cmd_report(const Args& args);
int cmd_tune(const Args& args);

namespace {

constexpr Command kCommands[] = {
    {"run", "run the training job a config describes (the default: `rlrun CONFIG`)",
     "usage: rlrun [run] CONFIG [--set key=value ...] [--run-dir DIR] [--resume]\n\n"
     "Runs asynchronous RL end to end on this machine: validates CONFIG (exit 2 with every\n"
     "error), creates the run folder (run_dir, or --run-dir) with the effective config.yaml and\n"
     "logs/, plans placement and prints it, serves Prometheus metrics on metrics_bind, starts\n"
     "the trainer ranks and rollout workers (this binary: `rlrun trainer`, `rlrun rollout`),\n"
     "then runs the data loop: prompts from the task, groups of group_size samples dispatched to\n"
     "rollout lanes, rewards and group advantages, the staleness gate (max_async_rollout,\n"
     "max_off_policy_steps), packing into seq_len rows, a trainer step per\n"
     "prompts_batch_size_for_trainer groups and a weight sync after each, for number_of_steps.\n\n"
     "Outputs in the run folder: summary.json (always, also after a failure or Ctrl-C),\n"
     "metrics.jsonl (one line per step), timeline.json (Chrome trace), logs/<process>.log.\n"
     "With checkpoint_every: N the trainer ranks save a checkpoint (weights, AdamW, the data\n"
     "position) under <run folder>/checkpoints/ after every N-th step and the last one.\n"
     "Ctrl-C stops dispatching, finishes the step in training, saves it (checkpoint_every > 0),\n"
     "writes the summary and shuts the workers down; a second Ctrl-C stops at once (the summary\n"
     "is still written), a third ends the orchestrator on the spot.\n\n"
     "  --set key=value   override a config key (repeatable)\n"
     "  --run-dir DIR     the run folder (default: run_dir from the config)\n"
     "  --resume          continue the run in that folder from its newest complete checkpoint,\n"
     "                    up to number_of_steps (metrics.jsonl is continued)\n\n"
     "exit status: 0 when every step ran, 1 when the run failed or was interrupted, 2 for bad\n"
     "flags or config.\n",
     cmd_run},
    {"version", "print the version and the compute backends this binary was built with",
     "usage: rlrun version\n\n"
     "Prints rlrun's version, whether the CUDA backend was built, the CUDA runtime and NCCL\n"
     "versions it links, and how many GPUs it can see.\n",
     cmd_version},
    {"validate", "check a config and print the effective configuration",
     "usage: rlrun validate CONFIG [--set key=value ...]\n"
     "       rlrun validate --print-defaults | --print-reference\n\n"
     "Loads CONFIG over the built-in defaults, applies each --set override (dotted keys for\n"
     "sections: --set model.hidden_size=64; the value is read as YAML; --set may repeat and may\n"
     "be written --set=key=value), and checks every key: unknown keys (with a suggestion), types,\n"
     "ranges, and combinations that cannot work together (e.g. inference_num_workers not\n"
     "divisible by inference_tensor_parallel_size). Nothing is started.\n\n"
     "On success it prints the effective configuration, every key, as YAML on stdout and exits 0.\n"
     "Otherwise it prints every error found on stderr, one per line as FILE:LINE: message (or\n"
     "--set key=value: message), and exits 2.\n\n"
     "  --print-defaults   print every key with its default and meaning (configs/defaults.yaml)\n"
     "  --print-reference  print every key's type, default, allowed values and meaning as\n"
     "                     Markdown (docs/configuration.md)\n",
     cmd_validate},
    {"trainer", "run one trainer rank (the orchestrator starts these)",
     "usage: rlrun trainer --orchestrator tcp://HOST:PORT --rank R (--config PATH | PATH)\n"
     "                     [--set key=value ...] [--timeline PATH] [--control-keys PATH] [--resume-from DIR]\n"
     "                     [--dp-group-epoch N] [--weight-group-epoch E]\n\n"
     "Runs one trainer rank: builds the model (model.checkpoint, or random init from seed and\n"
     "model.init_std), joins the trainer ranks' gradient group and, on rank 0, the weight-sync\n"
     "group (rendezvous through the orchestrator's control plane), registers, then serves\n"
     "TrainBatch (a trainer step: forward/backward over the packed micro-batches, gradient\n"
     "reduction, AdamW) with a TrainResult, WeightSyncBegin (rank 0 sends the weights to every\n"
     "rollout worker) with WeightSyncEnd, SaveCheckpoint with CheckpointSaved, and Shutdown.\n"
     "It exits when told to, or when the orchestrator has been silent for\n"
     "heartbeat_timeout_seconds.\n\n"
     "flags:\n"
     "  --orchestrator tcp://HOST:PORT  the orchestrator's control endpoint (required)\n"
     "  --rank R                        this trainer rank (default 0)\n"
     "  --config PATH                   the run's config (or PATH as the positional argument)\n"
     "  --set key=value                 override a config key (repeatable)\n"
     "  --timeline PATH                 write this process's Chrome-trace events there\n"
     "  --control-keys PATH             the run's CURVE key file (<run_dir>/keys/control_keys, mode 0600);\n"
     "                                  without it the control plane is unsecured (control_plane_security: none)\n"
     "  --resume-from DIR               load this complete checkpoint before registering\n"
     "  --dp-group-epoch N              form the gradient group dp-N (a restarted trainer group; default 0: dp)\n"
     "  --weight-group-epoch E          rank 0 joins weight-sync group weights-E while it starts (default 0);\n"
     "                                  -1: the group the first WeightSyncBegin names (a restarted rank 0)\n\n"
     "exit status: 0 after Shutdown, 1 on failure, 2 for bad flags or config.\n",
     cmd_trainer},
    {"generate", "generate one completion from an HF checkpoint folder or a .gguf file (KV cache, sampler)",
     "usage: rlrun generate --checkpoint DIR|FILE.gguf (--prompt TEXT [--chat] | --prompt-ids IDS) [options]\n\n"
     "Loads the HF model folder DIR (config.json, model.safetensors or a sharded index, and\n"
     "tokenizer.json when --prompt is used or text is wanted), or a llama GGUF file (weights\n"
     "dequantized to fp32, tokenizer from its metadata), and generates one completion on the\n"
     "CPU: the prompt is prefilled into a paged KV cache, then tokens are decoded one at a time\n"
     "and sampled (the rollout workers' path). Generation stops after a stop token (config.json's\n"
     "eos_token_id, and the tokenizer's <|im_end|> and <|endoftext|> when present) or after\n"
     "--max-tokens new tokens (or at the model's max_position_embeddings).\n\n"
     "Without --chat the prompt is used as given: no BOS and no chat template are added. With\n"
     "--chat it is one user message rendered by the checkpoint's own chat template (as HF's\n"
     "apply_chat_template with add_generation_prompt), and the template's end-of-turn token also\n"
     "stops generation.\n\n"
     "  --checkpoint DIR     the HF model folder, or a .gguf file\n"
     "  --prompt TEXT        prompt text, encoded with DIR/tokenizer.json (or the .gguf's tokenizer)\n"
     "  --prompt-ids IDS     prompt token ids, comma-separated (e.g. 1,2,3); no tokenizer needed\n"
     "  --chat               --prompt is a user message in the checkpoint's chat template\n"
     "                       (tokenizer_config.json, chat_template.jinja, or the .gguf's metadata)\n"
     "  --max-tokens N       new tokens at most (default 64)\n"
     "  --temperature T      sampling temperature, 0 = greedy (default 1)\n"
     "  --top-p P            nucleus sampling mass in (0, 1] (default 1)\n"
     "  --seed S             random seed of the sampler (default 0); same seed, same output\n"
     "  --threads N          CPU threads (default 1; 0 = every core)\n"
     "  --json               print one JSON object instead of the text:\n"
     "                       {\"prompt_ids\": [...], \"ids\": [...], \"logprobs\": [...],\n"
     "                        \"text\": \"...\" (null without a tokenizer),\n"
     "                        \"finish_reason\": \"stop\" | \"length\"}\n\n"
     "ids are the completion's tokens (the stop token included when one ended it); logprobs are\n"
     "their log-probabilities under the distribution sampled from (temperature and top-p\n"
     "applied; at temperature 0, under the model's own softmax). The text omits special tokens.\n"
     "Without --json the text is printed (the ids when DIR has no tokenizer). A timing line\n"
     "goes to stderr. Exit 0 on success, 2 for bad flags, a missing or invalid checkpoint, or\n"
     "prompt ids outside the vocabulary, 1 when generation fails.\n",
     cmd_generate},
    {"serve", "serve a checkpoint over OpenAI's HTTP API (/v1/completions, /v1/chat/completions)",
     "usage: rlrun serve --checkpoint DIR|FILE.gguf [--bind HOST:PORT] [options]\n\n"
     "Loads the checkpoint as `rlrun generate` does and answers OpenAI's API on HOST:PORT until\n"
     "SIGINT/SIGTERM: POST /v1/completions (prompt text or token ids), POST /v1/chat/completions\n"
     "(messages rendered with the checkpoint's chat template), GET /v1/models, GET /health. Requests\n"
     "take max_tokens, temperature, top_p, stop, n, seed, logprobs and stream (Server-Sent Events);\n"
     "each choice also carries the extension fields prompt_token_ids and token_ids. Concurrent\n"
     "requests are batched together by the rollout workers' continuous-batching scheduler over a\n"
     "paged KV cache. Bad requests get OpenAI's error object with an HTTP status\n"
     "(docs/openai-endpoint.md).\n\n"
     "  --checkpoint DIR      the HF model folder (with tokenizer.json), or a .gguf file\n"
     "  --bind HOST:PORT      listen address (default 127.0.0.1:8000; port 0: the system picks,\n"
     "                        the log says which)\n"
     "  --model-name NAME     the `model` clients name (default: the folder or file name)\n"
     "  --chat-template T     auto (the checkpoint's, default), none, or a Jinja file\n"
     "  --device D            compute backend: cpu (default) or cuda\n"
     "  --threads N           CPU compute threads (default 0 = every core)\n"
     "  --max-num-seqs N      sequences decoded together in one batch (default 16)\n"
     "  --max-model-len N     prompt + completion tokens (default: the model's, at most 2048)\n"
     "  --kv-cache-mb MB      KV cache size (default: max-num-seqs sequences of max-model-len,\n"
     "                        at most 512 MB; sequences beyond it wait or are preempted)\n"
     "  --http-threads N      requests served at once, streams and idle keep-alive connections\n"
     "                        included (default 64)\n"
     "  --request-timeout S   longest wait for one request's generation (default 600)\n\n"
     "exit status: 0 after SIGINT/SIGTERM, 1 when serving fails (e.g. the address is in use),\n"
     "2 for bad flags or a missing checkpoint.\n",
     cmd_serve},
    {"convert", "write an HF model folder from a llama .gguf file",
     "usage: rlrun convert IN.gguf OUT_DIR\n\n"
     "Writes OUT_DIR (created if missing) as an HF model folder that transformers loads:\n"
     "model.safetensors (fp32: quantized tensors are dequantized), config.json, tokenizer.json,\n"
     "tokenizer_config.json (special tokens and the file's chat template) and\n"
     "generation_config.json. Only llama models with a gpt2 (byte-level BPE) tokenizer and the\n"
     "tensor types F32, F16, BF16, Q8_0, Q4_0, Q4_1 are read; anything else is refused by name.\n"
     "rlrun itself also loads the .gguf directly (model.checkpoint, generate --checkpoint).\n\n"
     "exit status: 0 on success, 2 for a bad argument or an unreadable or unsupported file, 1 on\n"
     "a write failure.\n",
     cmd_convert},
    {"rollout", "run one rollout worker (generation server; the orchestrator starts these)",
     "usage: rlrun rollout --orchestrator tcp://HOST:PORT --index I (--config PATH | PATH)\n"
     "                     [--set key=value ...] [--host NAME] [--control-keys PATH] [--timeline PATH]\n\n"
     "Runs one rollout worker: a continuous-batching generation server over a paged KV cache.\n"
     "It registers with the orchestrator's control plane, serves GenerateRequest (one\n"
     "GenerateResult per sample as it finishes: tokens, log-probs, weight version per token),\n"
     "Cancel, WeightSyncBegin (new weights are loaded between decode steps) and Shutdown, and\n"
     "heartbeats its stats every heartbeat_interval_seconds. It exits when told to, or when the\n"
     "orchestrator has been silent for heartbeat_timeout_seconds. The orchestrator starts these\n"
     "processes itself; running one by hand is for debugging.\n\n"
     "flags:\n"
     "  --orchestrator tcp://HOST:PORT  the orchestrator's control endpoint (required)\n"
     "  --index I                       this worker's index among the rollout workers (required)\n"
     "  --config PATH                   the run's config (or PATH as the positional argument)\n"
     "  --set key=value                 override a config key (repeatable)\n"
     "  --host NAME                     host name reported at registration (default: hostname)\n"
     "  --weight-group-epoch E          join weight-sync group weights-E through the orchestrator\n"
     "                                  before registering (without it: the group the first\n"
     "                                  WeightSyncBegin names, as a replacement worker does)\n"
     "  --incarnation N                 this is the Nth replacement of worker I (default 0)\n"
     "  --timeline PATH                 write this process's Chrome-trace events there (generate, weight_update)\n"
     "  --control-keys PATH             the run's CURVE key file (<run_dir>/keys/control_keys, mode 0600);\n"
     "                                  without it the control plane is unsecured (control_plane_security: none)\n\n"
     "config keys used: model.*, seed, backend, cpu_threads_per_worker, max_model_len,\n"
     "max_num_seqs, kv_block_size, kv_cache_memory_mb, weight_broadcast_bucket_mb,\n"
     "heartbeat_interval_seconds, heartbeat_timeout_seconds, log_level.\n\n"
     "exit status: 0 after Shutdown, 1 when the orchestrator is unreachable or gone or the\n"
     "engine fails, 2 for bad flags or config.\n",
     cmd_rollout},
    {"plan", "print each process's memory budget, and what to change when it does not fit",
     "usage: rlrun plan CONFIG [--set key=value ...] [--json]\n"
     "       rlrun plan --compare RUN_DIR [--set key=value ...]\n\n"
     "Loads CONFIG like `rlrun validate` and prints, before anything starts, the memory budget of\n"
     "a trainer rank and of a rollout worker, each line in human units and in exact bytes:\n"
     "  trainer: weights, gradients, AdamW moments, fp32 master weights (cpu: fp32, 16 B/param;\n"
     "           cuda: bf16 weights + fp32 master, gradients and moments, 18 B/param; the\n"
     "           distributed optimizer divides the moments over the ranks), the activations of one\n"
     "           packed micro-batch of seq_len x micro_batch_rows tokens with AND without\n"
     "           gradient checkpointing (the engine's own count plus backward scratch), the\n"
     "           logits / log-prob workspace and the weight-send buffer;\n"
     "  rollout: weights, the weight-receive buffer, the prefill workspace and the KV cache: bytes\n"
     "           per token (2 x layers x kv_heads x head_dim x dtype bytes), how many sequences of\n"
     "           max_model_len fit in the pool (gpu_memory_utilization of the GPU, or\n"
     "           kv_cache_memory_mb on cpu) and how many of max_num_seqs would wait.\n"
     "Memory per process: device_memory_gb per GPU with backend cuda (plan a GPU run anywhere\n"
     "with --set backend=cuda), this host's RAM with backend cpu, shared by every process of a\n"
     "local run. The model's shape comes from `model:` or the checkpoint's config.json.\n\n"
     "When a budget does not fit, the plan says which and lists the levers in order of cost, each\n"
     "with the bytes it saves for this config and what it costs: gradient_checkpointing,\n"
     "use_distributed_optimizer, micro_batch_rows / seq_len, max_num_seqs, max_model_len, more\n"
     "trainer ranks, and (last resort) inference_tensor_parallel_size. `rlrun CONFIG` runs the\n"
     "same check before launching anything.\n\n"
     "  --json             the plan as JSON (keys documented in orchestrator/plan/memory_report.h)\n"
     "  --compare RUN_DIR  plan RUN_DIR/config.yaml and print it beside the peaks the run measured\n"
     "                     (RUN_DIR/summary.json: per process backend_peak_bytes, peak_memory_bytes,\n"
     "                     phase_peak_bytes), per process and phase, with measured/plan ratios\n\n"
     "Exit status: 0 the plan fits (or --compare printed), 3 the plan does not fit (the advice is\n"
     "printed), 2 the command line or config is wrong, 1 RUN_DIR/summary.json is missing or bad.\n",
     cmd_plan},
    {"report", "write a run folder's curves, summary, samples and config as one HTML page",
     "usage: rlrun report RUN_DIR [-o FILE]\n\n"
     "Reads the run folder RUN_DIR (what `rlrun CONFIG` wrote: metrics.jsonl, summary.json,\n"
     "config.yaml, and samples.jsonl when there is one) and writes RUN_DIR/report.html, one\n"
     "self-contained HTML file (inline SVG and CSS; it loads nothing, so it opens offline and can\n"
     "be mailed or attached as is) with:\n"
     "  curves     reward per step (and each reward term), held-out accuracy (before RL, every\n"
     "             evaluation, after RL), trainer idle per step beside the run's trainer and\n"
     "             rollout idle fractions, tokens/s generated and trained, the step time split\n"
     "             into wait / train / weight sync, peak memory per process;\n"
     "  summary    the headline figures and all of summary.json as tables;\n"
     "  samples    up to 5 sampled completions per step and kind (eval, train) from samples.jsonl;\n"
     "  config     config.yaml, collapsed.\n"
     "A run still in progress, cut short or partly unreadable still gets a report: malformed lines\n"
     "are skipped and counted (in the page and on stderr), missing files are said to be missing.\n"
     "Text from the run (prompts, completions, config) is HTML-escaped.\n\n"
     "  -o, --output FILE  write the page there instead of RUN_DIR/report.html\n\n"
     "exit status: 0 written, 2 for bad flags or when RUN_DIR is missing or holds neither a usable\n"
     "metrics.jsonl nor summary.json, 1 when the page cannot be written.\n",
     cmd_report},
    {"tune", "predict step time and idle gaps for other worker counts, asynchrony and lanes",
     "usage: rlrun tune RUN_DIR [--set key=value ...] [--cluster SPEC] [--json] [--seed N]\n\n"
     "Reads what the run in RUN_DIR measured (profile.json: the cost of a rollout engine step by\n"
     "batch, of a trained token and an optimizer step, of a weight sync; completion lengths; the\n"
     "groups discarded) and its config.yaml, and simulates the asynchronous loop (staleness gate,\n"
     "lanes, continuous batching, batches and minibatches, weight sync; processes sharing a node's\n"
     "cores) for other settings. Prints the predicted seconds per RL step and trainer/rollout idle\n"
     "fractions of the run's settings and of the best candidates (inference_num_workers,\n"
     "trainer_num_workers, max_async_rollout 0-2, max_concurrent_prompts_per_server), and the one\n"
     "change it recommends with the predicted gain. A running run can be tuned: profile.json is\n"
     "rewritten every 10 steps.\n\n"
     "  --set key=value  predict these settings instead of the run's (inference_num_workers,\n"
     "                   trainer_num_workers, max_async_rollout, number_of_minibatches,\n"
     "                   prompts_batch_size_for_trainer, max_concurrent_prompts_per_server,\n"
     "                   cpu_threads_per_worker)\n"
     "  --cluster SPEC   another cluster: nodes=N,gpus_per_node=G or nodes=N,cores_per_node=C, with\n"
     "                   generation_speed=X and training_speed=Y (per process, relative to the\n"
     "                   measured run) and allreduce_gbps=Z\n"
     "  --json           {\"prediction\", \"current\", \"recommended\", \"change\", \"candidates\"}: each\n"
     "                   with its settings, seconds_per_step, trainer_idle_fraction, rollout_idle_fraction\n"
     "  --seed N         the simulation's seed (completion lengths, discards); default 1\n\n"
     "exit status: 0 printed, 2 bad flags or config, 1 RUN_DIR has no usable profile.json.\n",
     cmd_tune},
};

void print_overview() {
  std::printf(
      "rlrun - asynchronous reinforcement-learning post-training for language models\n\n"
      "usage: rlrun CONFIG [--set key=value ...]   run the training job CONFIG describes\n"
      "       rlrun COMMAND [args]                 run one command\n"
      "       rlrun COMMAND --help                 explain one command\n\ncommands:\n");
  for (const Command& c : kCommands) {
    std::printf("  %-10s %.*s\n", std::string(c.name).c_str(), static_cast<int>(c.summary.size()),
                c.summary.data());
  }
}

bool is_help(const std::string& a) { return a == "--help" || a == "-h" || a == "help"; }

}  // namespace

std::span<const Command> commands() { return kCommands; }

const Command* find_command(std::string_view name) {
  for (const Command& c : kCommands) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

int rlrun_main(int argc, char** argv) {
  // OpenMP threads that spin while waiting steal the cores OpenBLAS and other processes of the
  // run need (measured: SmolLM2 decode 1.3 tokens/s with spinning, 20.8 passive, on 2 busy
  // cores). Set before the OpenMP runtime starts; an explicit user setting wins; workers inherit it.
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  set_checkpoint_reader(&engine::checkpoint_config_json);  // model.checkpoint: the engine reads it
  Args args(argv + 1, argv + argc);
  if (args.empty() || is_help(args[0])) {
    print_overview();
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] == "--version") args[0] = "version";
  const Command* command = find_command(args[0]);
  if (command == nullptr) {
    // `rlrun CONFIG ...` runs the default command when the first argument names a file.
    const Command* fallback = find_command("run");
    if (fallback != nullptr && std::filesystem::exists(args[0])) {
      command = fallback;
    } else {
      std::fprintf(stderr, "rlrun: `%s` is neither a command nor a config file; see `rlrun --help`\n",
                   args[0].c_str());
      return kExitUsage;
    }
  } else {
    args.erase(args.begin());
  }
  for (const std::string& a : args) {
    if (is_help(a) && a != "help") {
      std::printf("%.*s", static_cast<int>(command->usage.size()), command->usage.data());
      return kExitOk;
    }
  }
  log::set_process_name(std::string(command->name));
  return command->run(args);
}

}  // namespace rlrun::orchestrator
