// bench_model - training and decode throughput of a ~10M-parameter decoder on the CPU backend.
//
// Prints: training tokens/s and achieved GFLOP/s (6 * matmul params + causal attention per
// token) with and without gradient checkpointing, their ratio to the sgemm GFLOP/s measured in
// the same run, activation memory kept between forward and backward, peak backend memory, and
// batched decode tokens/s at batch 1, 8, 32, 64 over the paged KV cache. Never fails on time.
//
// Usage: bench_model [--threads N] [--steps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "engine/backend.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"

namespace {

using namespace rlrun::engine;
using rlrun::seconds_since;
using Clock = std::chrono::steady_clock;


// CPU seconds of this process (all threads): with wall time it shows how much of the machine
// the run actually got, since shared machines make wall-clock figures move.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  in >> one;
  return one.empty() ? "?" : one;
}

ModelConfig bench_config() {
  ModelConfig c;
  c.hidden_size = 256;
  c.num_layers = 8;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.intermediate_size = 688;
  c.vocab_size = 8192;
  c.tie_embeddings = false;
  return c;
}

std::unique_ptr<Backend> make_backend(int threads) {
  auto b = create_backend("cpu", threads);
  if (!b.ok()) {
    std::fprintf(stderr, "%s\n", b.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(b).value();
}

std::unique_ptr<Model> make_model(Backend& b, bool checkpointing) {
  auto m = Model::create(b, bench_config(), ModelOptions{checkpointing});
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().to_string().c_str());
    std::exit(1);
  }
  m.value()->weights().init_random(1, 0.02f);
  return std::move(m).value();
}

struct Rate {
  double wall = 0, cpu = 0;  // per wall second, per CPU second of this process
};

Rate sgemm_gflops(int threads) {
  auto b = make_backend(threads);
  const int64_t m = 1024, k = 256, n = 1024;
  Tensor x = b->zeros({m, k}, DType::kF32), w = b->zeros({n, k}, DType::kF32), y = b->zeros({m, n}, DType::kF32);
  b->matmul(y, x, w, false, true);  // warm-up
  const int reps = 20;
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  for (int r = 0; r < reps; ++r) b->matmul(y, x, w, false, true);
  const double flop = 2.0 * m * k * n * reps / 1e9;
  return {flop / seconds_since(t0), flop / (cpu_seconds() - c0)};
}

// 6 * (matmul parameters) + causal attention, per trained token.
double train_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const int64_t matmul_params = c.num_parameters() - c.vocab_size * c.hidden_size * (c.tie_embeddings ? 0 : 1);
  const double attn = 6.0 * c.num_layers * seq_len * c.num_heads * c.head_dim();  // 3 x (QK^T + AV) / 2 causal
  return 6.0 * matmul_params + attn;
}

struct TrainResult {
  double tokens_per_s = 0, step_s = 0, tokens_per_cpu_s = 0, step_cpu_s = 0;
  int64_t saved_bytes = 0, peak_bytes = 0, weight_bytes = 0;
};

TrainResult bench_train(int threads, bool checkpointing, int steps, int64_t seq_len, int64_t seqs) {
  auto b = make_backend(threads);
  auto model = make_model(*b, checkpointing);
  const int64_t weight_bytes = static_cast<int64_t>(b->bytes_in_use());
  const ModelConfig& c = model->config();
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size) - 1);
  std::vector<int32_t> tokens, positions, cu = {0}, targets;
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t i = 0; i < seq_len; ++i) {
      tokens.push_back(tok(rng));
      positions.push_back(static_cast<int32_t>(i));
      targets.push_back(i + 1 < seq_len ? tok(rng) : -1);
    }
    cu.push_back(static_cast<int32_t>(tokens.size()));
  }
  const PackedBatch batch{tokens, positions, cu, targets};
  TrainResult r;
  r.weight_bytes = weight_bytes;
  for (int step = -1; step < steps; ++step) {  // step -1 warms up
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    auto out = model->forward(batch);
    if (!out.ok()) std::exit(1);
    r.saved_bytes = model->saved_activation_bytes();
    model->backward(out->logprobs);  // d(logprob) = the log-probs themselves: any values do
    b->synchronize();
    if (step >= 0) r.step_s += seconds_since(t0) / steps;
    if (step >= 0) r.step_cpu_s += (cpu_seconds() - c0) / steps;
  }
  r.tokens_per_s = static_cast<double>(tokens.size()) / r.step_s;
  r.tokens_per_cpu_s = static_cast<double>(tokens.size()) / r.step_cpu_s;
  r.peak_bytes = static_cast<int64_t>(b->peak_bytes());
  return r;
}

// Decode tokens/s for `batch` sequences that each have a 32-token prompt, over `steps` steps.
Rate bench_decode(int threads, int64_t batch, int steps) {
  auto b = make_backend(threads);
  auto model = make_model(*b, false);
  const int64_t prompt = 32, block = 16;
  const int64_t blocks = batch * ((prompt + steps + block - 1) / block + 1);
  auto cache = KvCache::create(*b, KvCacheConfig::for_model(model->config(), block, blocks));
  if (!cache.ok()) std::exit(1);
  std::vector<SeqId> ids;
  std::vector<int32_t> flat, cu = {0}, next(batch, 1);
  for (int64_t s = 0; s < batch; ++s) {
    ids.push_back(s);
    if (!(*cache)->add_sequence(s).ok()) std::exit(1);
    for (int64_t i = 0; i < prompt; ++i) flat.push_back(static_cast<int32_t>((s * 31 + i * 7) % 8192));
    cu.push_back(static_cast<int32_t>(flat.size()));
  }
  if (!model->forward_cached(**cache, ids, flat, cu).ok()) std::exit(1);
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  for (int step = 0; step < steps; ++step) {
    auto logits = model->decode(**cache, ids, next);
    if (!logits.ok()) std::exit(1);
    // Greedy choice on the host, as a rollout worker's sampler would see it.
    const std::vector<float> l = to_host_f32(*logits);
    for (int64_t s = 0; s < batch; ++s) {
      const float* row = l.data() + s * 8192;
      next[s] = static_cast<int32_t>(std::max_element(row, row + 8192) - row);
    }
  }
  const double tokens = static_cast<double>(batch * steps);
  return {tokens / seconds_since(t0), tokens / (cpu_seconds() - c0)};
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, steps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--steps")) steps = std::max(1, std::atoi(argv[i + 1]));
  }
  const ModelConfig c = bench_config();
  const int64_t seq_len = 256, seqs = 4;
  std::printf("model: hidden %ld, %ld layers, %ld/%ld heads, intermediate %ld, vocab %ld: %.2fM parameters\n",
              c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.intermediate_size, c.vocab_size,
              c.num_parameters() / 1e6);
  const auto wall0 = Clock::now();
  const double cpu0 = cpu_seconds();
  std::printf("threads %d (0 = all), machine load average %s\n", threads, load_average().c_str());
  const Rate gemm = sgemm_gflops(threads);
  std::printf("sgemm (1024x256 @ 256x1024): %.1f GFLOP/s wall, %.1f per CPU second\n", gemm.wall, gemm.cpu);
  std::printf("(on a shared machine the per-CPU-second figures are the stable ones)\n");

  const double flops_tok = train_flops_per_token(c, seq_len);
  std::printf("training: %ld sequences of %ld tokens packed in one micro-batch, %.1f MFLOP per token\n", seqs,
              seq_len, flops_tok / 1e6);
  TrainResult res[2];
  for (int ck = 0; ck < 2; ++ck) {
    const TrainResult& r = res[ck] = bench_train(threads, ck == 1, steps, seq_len, seqs);
    const double gflops = r.tokens_per_s * flops_tok / 1e9, gflops_cpu = r.tokens_per_cpu_s * flops_tok / 1e9;
    std::printf("  checkpointing %-3s: %6.0f tokens/s %5.1f GFLOP/s (%3.0f%% of sgemm) wall | per CPU s: %6.0f tokens, "
                "%5.1f GFLOP (%3.0f%% of sgemm), step %.2f cpu-s\n",
                ck ? "on" : "off", r.tokens_per_s, gflops, 100.0 * gflops / gemm.wall, r.tokens_per_cpu_s, gflops_cpu,
                100.0 * gflops_cpu / gemm.cpu, r.step_cpu_s);
    std::printf("      activations kept %.1f MiB, peak %.1f MiB (weights + grads %.1f MiB)\n",
                r.saved_bytes / 1048576.0, r.peak_bytes / 1048576.0, r.weight_bytes / 1048576.0);
  }
  std::printf("  checkpointing saves %.1f MiB of kept activations (%.1fx less), %.1f MiB of peak, costs %+.0f%% CPU time per step\n",
              (res[0].saved_bytes - res[1].saved_bytes) / 1048576.0,
              static_cast<double>(res[0].saved_bytes) / static_cast<double>(std::max<int64_t>(1, res[1].saved_bytes)),
              (res[0].peak_bytes - res[1].peak_bytes) / 1048576.0, 100.0 * (res[1].step_cpu_s / res[0].step_cpu_s - 1.0));

  std::printf("decode (32-token prompts, paged KV cache, blocks of 16):\n");
  for (int64_t batch : {1, 8, 32, 64}) {
    const Rate r = bench_decode(threads, batch, 16);
    std::printf("  batch %2ld: %7.0f tokens/s wall, %7.0f per CPU second\n", batch, r.wall, r.cpu);
  }
  std::printf("whole run: %.1f s wall, %.1f s cpu, load average now %s\n", seconds_since(wall0),
              cpu_seconds() - cpu0, load_average().c_str());
  return 0;
}
