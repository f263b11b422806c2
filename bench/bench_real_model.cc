// bench_real_model - rlrun's engine on a real pretrained model (SmolLM2-135M-Instruct by default),
// the figures bench/real_model.py sets beside PyTorch / HF transformers on the same cores:
//   * sgemm GFLOP/s of this backend (1024 x 1024 x 1024, f32): the bound;
//   * training tokens/s: packed micro-batches of `--train-seqs` sequences of `--train-len` tokens,
//     forward + backward + AdamW, f32, and the step's GFLOP/s against the bound; with --lora R
//     the same step trains low-rank adapters of rank R (--lora-alpha, --lora-targets: PEFT's
//     target_modules names, default every linear layer of attention and MLP) on the frozen model,
//     as trainer/lora_adapter.h does in a run: AdamW over the adapters only, no base gradients;
//   * generation tokens/s through the rollout scheduler (continuous batching over the paged KV
//     cache) at each batch of `--batches`: batch/8 groups of 8 samples, each group sharing one
//     prompt of `--prompt-len` tokens, `--new-tokens` sampled at temperature 1 (no stop token, so
//     every sample decodes them all). Counted: new tokens / wall seconds from submission to the
//     last token (prefill included, as HF generate's figure includes it).
// With --compute-dtype bf16 the products run bf16 x bf16 -> fp32 (compute_dtype: bf16, where the
// CPU has AVX512_BF16 or AMX), and a line gives the log-prob drift of the training batch against
// fp32: max and mean |logprob_bf16 - logprob_fp32| over its tokens.
// --base-weights-dtype bf16 keeps the model's matrices in bf16 only (base_weights_dtype: bf16, a
// frozen base: with --lora the adapters train on it, without the training figure is skipped); a
// line gives the log-prob drift against the fp32 model, and one the model's bytes for the trainer
// and a rollout worker (ModelWeights::bytes, plus the adapters with their gradients and moments).
// Medians of --reps runs. Prints a table and one JSON line ("json: {...}") for real_model.py.
// Never fails on time.
//
// Usage: bench_real_model [--model PATH.gguf|DIR] [--threads N] [--reps R] [--train-seqs S]
//                         [--train-len L] [--batches 1,8,32,64] [--prompt-len P] [--new-tokens T]
//                         [--compute-dtype fp32|bf16] [--base-weights-dtype fp32|bf16]
//                         [--skip-train] [--skip-generate]
//                         [--lora R [--lora-alpha A] [--lora-targets q_proj,...|all]]
#include <time.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "engine/backend_info.h"
#include "engine/io/model_io.h"
#include "engine/cpu/cpu_gemm.h"
#include "engine/model/lora.h"
#include "engine/model/model.h"
#include "rollout/scheduler.h"
#include "trainer/lora_adapter.h"
#include "trainer/optimizer.h"


using namespace rlrun::engine;
using rlrun::Result;
using rlrun::Status;
namespace trainer = rlrun::trainer;
namespace rollout = rlrun::rollout;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

template <typename T>
T or_die(Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "bench_real_model: %s: %s\n", what, r.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

void or_die(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "bench_real_model: %s: %s\n", what, s.to_string().c_str());
    std::exit(1);
  }
}

double sgemm_gflops(Backend& b, int reps) {
  const int64_t n = 1024;
  Tensor x = b.zeros({n, n}, DType::kF32), w = b.zeros({n, n}, DType::kF32), y = b.zeros({n, n}, DType::kF32);
  b.matmul(y, x, w, false, true);  // warm-up
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < 5; ++i) b.matmul(y, x, w, false, true);
    b.synchronize();
    rates.push_back(5 * 2.0 * double(n * n * n) / since(t0) / 1e9);
  }
  return median(rates);
}

// Parameters that take part in a product: all but an untied embedding table (a lookup; tied, it is
// the output layer's matrix).
double matmul_params(const ModelConfig& c) {
  return double(c.num_parameters()) - (c.tie_embeddings ? 0.0 : double(c.vocab_size * c.hidden_size));
}

// 6 x matmul parameters + causal attention, per trained token.
double train_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const double attn = 6.0 * double(c.num_layers) * double(seq_len) * double(c.num_heads * c.head_dim());
  return 6.0 * matmul_params(c) + attn;
}

// `seqs` packed sequences of `len` random token ids, each predicting its next token: the training
// batch (bench_train) and the one the drift lines score (batch_logprobs).
struct RandomBatch {
  std::vector<int32_t> tokens, positions, cu = {0}, targets;
  RandomBatch(const ModelConfig& c, int64_t seqs, int64_t len) {
    std::mt19937 rng(3);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size) - 1);
    for (int64_t s = 0; s < seqs; ++s) {
      for (int64_t i = 0; i < len; ++i) {
        tokens.push_back(tok(rng));
        positions.push_back(static_cast<int32_t>(i));
      }
      for (int64_t i = 0; i < len; ++i) targets.push_back(i + 1 < len ? tokens[tokens.size() - len + i + 1] : -1);
      cu.push_back(static_cast<int32_t>(tokens.size()));
    }
  }
  PackedBatch packed() const { return PackedBatch{tokens, positions, cu, targets}; }
};

struct TrainFigures {
  double tokens_per_s = 0, step_s = 0, gflops = 0;
  int64_t trained_params = 0;  // what AdamW updates: the model, or the adapters
  // The backend's own count over the timed steps, per step: where the step's time went.
  double matmul_s = 0, matmul_gflop = 0;
  int64_t matmul_calls = 0;
};

// FLOPs of a LoRA step per token: the frozen products forward and back through their inputs
// (4 x parameters; no weight gradient), attention as in full training, and the adapters' own
// products (forward, the recomputed x A^T, dA, dB, dx: 6 + 2 per adapter parameter, an upper bound).
double lora_flops_per_token(const ModelConfig& c, int64_t seq_len, int64_t adapter_params) {
  const double attn = 6.0 * double(c.num_layers) * double(seq_len) * double(c.num_heads * c.head_dim());
  return 4.0 * matmul_params(c) + attn + 8.0 * double(adapter_params);
}

// Forward + backward + AdamW on `seqs` x `len` random tokens: every weight, or only `adapters`
// when they are attached to the frozen model (trainer::LoraModelAdapter). Medians of `reps` steps
// after one warm-up.
TrainFigures bench_train(Model& model, LoraWeights* adapters, int64_t seqs, int64_t len, int reps) {
  Backend& b = model.backend();
  const ModelConfig& c = model.config();
  const RandomBatch random(c, seqs, len);
  const std::vector<int32_t>& tokens = random.tokens;
  const PackedBatch batch = random.packed();
  trainer::OptimizerOptions oo;
  oo.weight_decay = 0.0;
  const int64_t flat = adapters ? adapters->flat_size() : model.weights().flat_size();
  auto opt = or_die(trainer::Optimizer::create(b, flat, {}, oo, nullptr), "optimizer");
  std::vector<float> d(tokens.size(), -1.0f / float(tokens.size()));
  const Tensor dlogprob = from_host(b, {static_cast<int64_t>(d.size())}, d);
  std::vector<double> steps;
  Backend::MatmulStats before;
  for (int r = -1; r < reps; ++r) {  // r = -1 warms up
    if (r == 0) before = b.matmul_stats();
    const auto t0 = Clock::now();
    if (adapters) adapters->zero_grads();
    else model.weights().zero_grads();
    auto out = or_die(model.forward(batch), "forward");
    model.backward(dlogprob);
    if (adapters) {  // the adapters' master is what forward reads: nothing to sync
      or_die(opt->step(adapters->master_flat(), adapters->grad_flat(), 1e-4).status(), "optimizer step");
    } else {
      or_die(opt->step(model.weights().master_flat(), model.weights().grad_flat(), 1e-6).status(), "optimizer step");
      model.weights().sync_compute();
    }
    b.synchronize();
    if (r >= 0) steps.push_back(since(t0));
  }
  const Backend::MatmulStats after = b.matmul_stats();
  TrainFigures f;
  f.step_s = median(steps);
  f.tokens_per_s = double(tokens.size()) / f.step_s;
  f.matmul_s = (after.seconds - before.seconds) / reps;
  f.matmul_gflop = (after.flops - before.flops) / 1e9 / reps;
  f.matmul_calls = (after.calls - before.calls) / reps;
  if (adapters) {
    for (const ParamInfo& p : adapters->params()) f.trained_params += p.numel;
  } else {
    f.trained_params = c.num_parameters();
  }
  const double per_token = adapters ? lora_flops_per_token(c, len, f.trained_params) : train_flops_per_token(c, len);
  f.gflops = f.tokens_per_s * per_token / 1e9;
  return f;
}

struct GenFigures {
  int64_t batch = 0;
  double tokens_per_s = 0, seconds = 0;
};

GenFigures bench_generate(Model& model, int64_t batch, int64_t prompt_len, int64_t new_tokens, int reps) {
  const ModelConfig& c = model.config();
  rollout::SchedulerOptions o;
  o.max_num_seqs = std::max<int64_t>(batch, 1);
  o.max_model_len = prompt_len + new_tokens + 1;
  o.kv_block_size = 16;
  o.max_prefill_tokens = std::max<int64_t>(4096, batch * prompt_len);
  o.kv_num_blocks = rollout::kv_blocks_for_budget(model, o, 0);
  const int64_t group = std::min<int64_t>(batch, 8);
  std::vector<double> times;
  for (int r = -1; r < reps; ++r) {
    auto sched = or_die(rollout::Scheduler::create(model, o), "scheduler");
    std::mt19937 rng(11 + static_cast<uint32_t>(r + 1));
    std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(c.vocab_size) - 1);
    for (int64_t g = 0; g < batch / group; ++g) {
      rollout::GenerationRequest q;
      q.request_id = static_cast<uint64_t>(g);
      q.prompt.resize(static_cast<size_t>(prompt_len));
      for (int32_t& t : q.prompt) t = tok(rng);
      q.num_samples = static_cast<uint32_t>(group);
      q.sampling.temperature = 1.0f;
      q.max_tokens = new_tokens;
      q.seed = static_cast<uint64_t>(g + 1);
      sched->add(q);
    }
    const auto t0 = Clock::now();
    while (sched->has_unfinished()) or_die(sched->step(), "scheduler step");
    if (r >= 0) times.push_back(since(t0));
    if (sched->stats().tokens_generated != batch * new_tokens) {
      std::fprintf(stderr, "bench_real_model: generated %lld tokens, expected %lld\n",
                   static_cast<long long>(sched->stats().tokens_generated),
                   static_cast<long long>(batch * new_tokens));
      std::exit(1);
    }
  }
  GenFigures f;
  f.batch = batch;
  f.seconds = median(times);
  f.tokens_per_s = double(batch * new_tokens) / f.seconds;
  return f;
}

// The training batch's log-probs (f32, on the host).
std::vector<float> batch_logprobs(Model& model, int64_t seqs, int64_t len) {
  const RandomBatch random(model.config(), seqs, len);
  return to_host_f32(or_die(model.forward(random.packed(), false), "forward").logprobs);
}

// {max, mean} |got - ref| over the training batch's scored tokens.
std::pair<double, double> drift(const std::vector<float>& ref, const std::vector<float>& got, const ModelConfig& c,
                                int64_t seqs, int64_t len) {
  const RandomBatch random(c, seqs, len);
  double max = 0, sum = 0;
  int64_t n = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (random.targets[i] < 0) continue;
    const double d = std::abs(double(got[i]) - double(ref[i]));
    max = std::max(max, d);
    sum += d;
    ++n;
  }
  return {max, n > 0 ? sum / double(n) : 0.0};
}

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) out.push_back(std::atoll(part.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path = std::string(RLRUN_BENCH_SOURCE_DIR) + "/build/models/smollm2-135m-instruct.Q4_1.gguf";
  int threads = 2, reps = 3;
  int64_t train_seqs = 8, train_len = 64, prompt_len = 48, new_tokens = 16;
  std::vector<int64_t> batches = {1, 8, 32, 64};
  bool train = true, generate = true, bf16 = false, base_bf16 = false;
  LoraConfig lora;  // rank 0: full fine-tuning
  lora.alpha = 32;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (k == "--skip-train") {
      train = false;
      continue;
    }
    if (k == "--skip-generate") {
      generate = false;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_real_model: %s needs a value\n", k.c_str());
      return 2;
    }
    ++i;
    if (k == "--model") model_path = v;
    else if (k == "--threads") threads = std::atoi(v);
    else if (k == "--reps") reps = std::max(1, std::atoi(v));
    else if (k == "--train-seqs") train_seqs = std::atoll(v);
    else if (k == "--train-len") train_len = std::atoll(v);
    else if (k == "--batches") batches = parse_list(v);
    else if (k == "--prompt-len") prompt_len = std::atoll(v);
    else if (k == "--new-tokens") new_tokens = std::atoll(v);
    else if (k == "--compute-dtype" && (std::strcmp(v, "fp32") == 0 || std::strcmp(v, "bf16") == 0))
      bf16 = std::strcmp(v, "bf16") == 0;
    else if (k == "--base-weights-dtype" && (std::strcmp(v, "fp32") == 0 || std::strcmp(v, "bf16") == 0))
      base_bf16 = std::strcmp(v, "bf16") == 0;
    else if (k == "--lora") lora.rank = std::atoll(v);
    else if (k == "--lora-alpha") lora.alpha = std::atof(v);
    else if (k == "--lora-targets") lora.targets = or_die(parse_lora_targets(v), "--lora-targets");
    else {
      std::fprintf(stderr, "bench_real_model: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (lora.rank < 0 || (lora.rank > 0 && bf16)) {
    std::fprintf(stderr, "bench_real_model: --lora takes a rank >= 1 (0: full fine-tuning) and fp32 products "
                         "(the adapters are f32)\n");
    return 2;
  }
  auto backend = or_die(create_backend("cpu", threads), "backend");
  if ((bf16 || base_bf16) && !rlrun::engine::cpu::bf16_gemm_native()) {
    std::fprintf(stderr, "bench_real_model: bf16: this CPU has no native bf16 products\n");
    return 2;
  }
  if (base_bf16 && lora.rank == 0) train = false;  // a frozen base alone cannot train
  std::vector<float> fp32_logprobs;  // --base-weights-dtype bf16: the fp32 model's, for the drift
  if (base_bf16) {
    auto ref = or_die(load_model(*backend, model_path), "loading the model (fp32)");
    fp32_logprobs = batch_logprobs(*ref, train_seqs, train_len);
  }
  ModelOptions options;
  if (base_bf16) options.weight_storage = WeightStorage::kBf16Frozen;
  const auto load_start = Clock::now();
  auto model = or_die(load_model(*backend, model_path, options), "loading the model");
  const ModelConfig& c = model->config();
  std::printf("model %s: %.1fM parameters, %lld layers, hidden %lld, vocab %lld; loaded in %.1f s; %d threads\n",
              model_path.c_str(), double(c.num_parameters()) / 1e6, static_cast<long long>(c.num_layers),
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.vocab_size), since(load_start), threads);
  const std::string host = measure_host_compute().summary;
  std::printf("host: %s\n", host.c_str());
  // --lora: the adapters (PEFT's init, B = 0) on the frozen model, as a run's trainer attaches
  // them; training updates them and generation runs with them, as a rollout worker does.
  std::unique_ptr<LoraWeights> adapters;
  std::unique_ptr<trainer::LoraModelAdapter> attached;
  if (lora.rank > 0) {
    adapters = or_die(LoraWeights::create(*backend, c, lora), "LoRA adapters");
    adapters->init(1);
    attached = or_die(trainer::LoraModelAdapter::create(*model, *adapters), "attaching the adapters");
  }
  // A rollout worker holds the weights (no gradients) and the adapters; a trainer also the
  // adapters' gradient and two AdamW moments, or without adapters the model's (f32).
  const ModelWeights& w = model->weights();
  const double weights_gb = double(w.bytes() - (w.has_grads() ? int64_t(w.grad_flat().nbytes()) : 0)) / 1e9;
  const double trained_gb = 4.0 * double(adapters ? adapters->flat_size() : w.flat_size()) / 1e9;
  const double rollout_gb = weights_gb + (lora.rank > 0 ? trained_gb : 0.0);
  const double trainer_gb = weights_gb + (lora.rank > 0 ? 4.0 : 3.0) * trained_gb;
  std::printf("model bytes (base %s%s): weights %.3f GB; rollout worker %.3f GB, trainer %.3f GB\n",
              base_bf16 ? "bf16" : "fp32", lora.rank > 0 ? " + LoRA adapters" : "", weights_gb, rollout_gb, trainer_gb);
  double drift_max = 0, drift_mean = 0;
  if (bf16) {
    const std::vector<float> ref = batch_logprobs(*model, train_seqs, train_len);
    backend->set_matmul_bf16(true);
    std::tie(drift_max, drift_mean) = drift(ref, batch_logprobs(*model, train_seqs, train_len), c, train_seqs, train_len);
    std::printf("compute dtype bf16: log-prob drift against fp32 over %lld x %lld tokens: max %.4f, mean %.5f\n",
                static_cast<long long>(train_seqs), static_cast<long long>(train_len), drift_max, drift_mean);
  }
  if (base_bf16) {
    std::tie(drift_max, drift_mean) =
        drift(fp32_logprobs, batch_logprobs(*model, train_seqs, train_len), c, train_seqs, train_len);
    std::printf("base weights bf16: log-prob drift against the fp32 model over %lld x %lld tokens: max %.4f, "
                "mean %.5f\n",
                static_cast<long long>(train_seqs), static_cast<long long>(train_len), drift_max, drift_mean);
  }
  const double bound = sgemm_gflops(*backend, reps);
  std::printf("%s 1024^3: %.1f GFLOP/s (the bound)\n", bf16 ? "GEMM bf16 x bf16 -> f32" : "sgemm f32", bound);
  std::ostringstream json;
  json << "{\"host\":" << nlohmann::json(host).dump() << ",\"threads\":" << threads << ",\"compute_dtype\":\"" << (bf16 ? "bf16" : "fp32")
       << "\",\"base_weights_dtype\":\"" << (base_bf16 ? "bf16" : "fp32") << "\",\"rollout_model_gb\":" << rollout_gb
       << ",\"trainer_model_gb\":" << trainer_gb << ",\"sgemm_gflops\":" << bound;
  if (bf16 || base_bf16) json << ",\"logprob_drift\":{\"max\":" << drift_max << ",\"mean\":" << drift_mean << "}";
  if (train) {
    const TrainFigures t = bench_train(*model, adapters.get(), train_seqs, train_len, reps);
    std::string what = "forward + backward + AdamW";
    if (lora.rank > 0) {
      std::string targets;
      for (int i = 0; i < kLoraTargets; ++i)
        if (lora.targets[i]) targets += std::string(targets.empty() ? "" : ",") + lora_target_name(LoraTarget(i));
      what = "LoRA rank " + std::to_string(lora.rank) + ", alpha " + std::to_string(int(lora.alpha)) + " on " +
             targets + ": " + what + " of " + std::to_string(t.trained_params) + " adapter parameters";
    }
    std::printf("training %lld x %lld tokens (%s): %.3f s/step, %.1f tokens/s, %.1f GFLOP/s = %.0f%% of sgemm; "
                "matmuls %.1f GFLOP in %.3f s (%lld calls) a step\n",
                static_cast<long long>(train_seqs), static_cast<long long>(train_len), what.c_str(), t.step_s,
                t.tokens_per_s, t.gflops, 100.0 * t.gflops / bound, t.matmul_gflop, t.matmul_s,
                static_cast<long long>(t.matmul_calls));
    json << ",\"train\":{\"seqs\":" << train_seqs << ",\"len\":" << train_len << ",\"step_s\":" << t.step_s
         << ",\"tokens_per_s\":" << t.tokens_per_s << ",\"gflops\":" << t.gflops
         << ",\"trained_params\":" << t.trained_params << ",\"matmul_s\":" << t.matmul_s
         << ",\"matmul_gflop\":" << t.matmul_gflop;
    if (lora.rank > 0) json << ",\"lora\":{\"rank\":" << lora.rank << ",\"alpha\":" << lora.alpha << "}";
    json << "}";
  }
  if (generate) {
    json << ",\"generate\":{\"prompt_len\":" << prompt_len << ",\"new_tokens\":" << new_tokens << ",\"batches\":[";
    for (size_t i = 0; i < batches.size(); ++i) {
      const GenFigures g = bench_generate(*model, batches[i], prompt_len, new_tokens, reps);
      std::printf("generation batch %3lld (groups of %lld sharing a %lld-token prompt, %lld new tokens): %.3f s, "
                  "%.1f tokens/s\n",
                  static_cast<long long>(g.batch), static_cast<long long>(std::min<int64_t>(g.batch, 8)),
                  static_cast<long long>(prompt_len), static_cast<long long>(new_tokens), g.seconds, g.tokens_per_s);
      json << (i ? "," : "") << "{\"batch\":" << g.batch << ",\"seconds\":" << g.seconds
           << ",\"tokens_per_s\":" << g.tokens_per_s << "}";
    }
    json << "]}";
  }
  json << "}";
  std::printf("json: %s\n", json.str().c_str());
  return 0;
}
