// bench_cuda - the CUDA backend's headline figures on a ~0.5B Llama-shape model (Qwen2.5-0.5B's
// shape: hidden 896, 24 layers, 14 query / 2 kv heads of 64, MLP 4864, vocabulary 151936, tied):
//
//   train   tokens/s and MFU of one training step (forward + backward + AdamW + bf16 refresh) on
//           packed micro-batches of sequences of --seq-len (default 2048) tokens. Model FLOPs per
//           step = 6 * (matmul parameters, lm_head included) * tokens + 6 * layers * Hq * D *
//           sum of len^2 (causal attention, forward and backward); MFU = that / time / peak.
//   decode  tokens/s at batch 1 and 64 over the paged KV cache (128-token prompts, greedy on host).
//   sync    weight sync seconds: master f32 -> bf16 flat buffer, NCCL broadcast from rank 0 to one
//           rank per visible GPU (threads of this process), and the receivers' bf16 copy-in.
//           With one GPU the group has one rank and the figure is the conversion + copy only.
//
// Without a device it prints "no CUDA device" and exits 0 (CI builds and runs it everywhere).
// Never fails on time. Usage: bench_cuda [--steps N] [--seq-len N] [--seqs N] [--peak-tflops X]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "engine/backend.h"
#include "engine/comm/communicator.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#ifdef RLRUN_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/device.h"
#include "engine/cuda/nccl_communicator.h"
#endif

namespace {

using namespace rlrun::engine;
using rlrun::seconds_since;
using Clock = std::chrono::steady_clock;


struct Options {
  int steps = 5;
  int64_t seq_len = 2048;
  int64_t seqs = 4;             // sequences per packed micro-batch
  double peak_tflops = 989.4;   // H100/H200 SXM dense bf16
};

ModelConfig half_billion() {
  ModelConfig c;
  c.architecture = "qwen2";
  c.hidden_size = 896;
  c.num_layers = 24;
  c.num_heads = 14;
  c.num_kv_heads = 2;
  c.intermediate_size = 4864;
  c.vocab_size = 151936;
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-6;
  c.qkv_bias = true;
  c.tie_embeddings = true;
  c.max_position = 32768;
  return c;
}

// Parameters that take part in matmuls (every linear weight, and the lm_head / tied table).
double matmul_params(const ModelConfig& c) {
  const double h = static_cast<double>(c.hidden_size), d = h / static_cast<double>(c.num_heads);
  const double attn = h * d * (2.0 * static_cast<double>(c.num_heads) + 2.0 * static_cast<double>(c.num_kv_heads));
  const double mlp = 3.0 * h * static_cast<double>(c.intermediate_size);
  return static_cast<double>(c.num_layers) * (attn + mlp) + h * static_cast<double>(c.vocab_size);
}

#ifdef RLRUN_HAVE_CUDA

std::unique_ptr<Backend> make_gpu(int device) {
  auto b = cuda::create_cuda_backend(device);
  if (!b.ok()) {
    std::fprintf(stderr, "bench_cuda: %s\n", b.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(b).value();
}

std::unique_ptr<Model> make_model(Backend& b, ModelOptions options = {}) {
  auto m = Model::create(b, half_billion(), options);
  if (!m.ok()) {
    std::fprintf(stderr, "bench_cuda: %s\n", m.status().to_string().c_str());
    std::exit(1);
  }
  (*m)->weights().init_random(1, 0.02f);
  return std::move(m).value();
}

void bench_train(const Options& o) {
  auto b = make_gpu(0);
  auto model = make_model(*b);
  const ModelConfig& c = model->config();
  std::vector<int32_t> tokens, positions, cu = {0}, targets;
  for (int64_t s = 0; s < o.seqs; ++s) {
    for (int64_t i = 0; i < o.seq_len; ++i) {
      tokens.push_back(static_cast<int32_t>((s * 7919 + i * 104729) % c.vocab_size));
      positions.push_back(static_cast<int32_t>(i));
      targets.push_back(i + 1 < o.seq_len ? static_cast<int32_t>((s * 7919 + (i + 1) * 104729) % c.vocab_size) : -1);
    }
    cu.push_back(static_cast<int32_t>(tokens.size()));
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  const PackedBatch batch{tokens, positions, cu, targets};
  const int64_t p = model->weights().flat_size();
  Tensor m = b->zeros(Shape{p}, DType::kF32), v = b->zeros(Shape{p}, DType::kF32);
  const Tensor dlogprob = from_host(*b, Shape{n}, std::vector<float>(static_cast<size_t>(n), -1.0f / n));
  std::vector<double> times;
  for (int step = 1; step <= o.steps + 2; ++step) {  // two warm-up steps (cuBLASLt heuristics, pool growth)
    b->synchronize();
    const auto t0 = Clock::now();
    model->weights().zero_grads();
    auto out = model->forward(batch);
    if (!out.ok()) {
      std::fprintf(stderr, "bench_cuda: forward: %s\n", out.status().to_string().c_str());
      std::exit(1);
    }
    model->backward(dlogprob);
    AdamWParams ap;
    ap.lr = 1e-6f;
    ap.step = step;
    b->adamw_step(model->weights().master_flat(), model->weights().grad_flat(), m, v, ap);
    model->weights().sync_compute();
    b->synchronize();
    if (step > 2) times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  const double t = times[times.size() / 2];
  const double attn = 6.0 * static_cast<double>(c.num_layers) * static_cast<double>(c.num_heads) *
                      (static_cast<double>(c.hidden_size) / static_cast<double>(c.num_heads)) *
                      static_cast<double>(o.seqs) * static_cast<double>(o.seq_len) * static_cast<double>(o.seq_len);
  const double flops = 6.0 * matmul_params(c) * static_cast<double>(n) + attn;
  auto* cb = dynamic_cast<cuda::CudaBackend*>(b.get());
  std::printf("train: %lld x %lld tokens, median step %.3f s, %.0f tokens/s, %.1f TFLOP/s, MFU %.1f%% of %.1f TFLOP/s\n",
              static_cast<long long>(o.seqs), static_cast<long long>(o.seq_len), t, static_cast<double>(n) / t,
              flops / t / 1e12, 100.0 * flops / t / (o.peak_tflops * 1e12), o.peak_tflops);
  std::printf("train memory: %s\n", cb->memory_stats().str().c_str());
}

void bench_decode(int64_t batch, int steps) {
  auto b = make_gpu(0);
  auto model = make_model(*b);
  const ModelConfig& c = model->config();
  const int64_t prompt = 128, block = 16;
  const int64_t blocks = batch * ((prompt + steps + block - 1) / block + 1);
  auto cache = KvCache::create(*b, KvCacheConfig::for_model(c, block, blocks));
  if (!cache.ok()) std::exit(1);
  std::vector<SeqId> ids;
  std::vector<int32_t> flat, cu = {0}, next(static_cast<size_t>(batch), 1);
  for (int64_t s = 0; s < batch; ++s) {
    ids.push_back(s);
    if (!(*cache)->add_sequence(s).ok()) std::exit(1);
    for (int64_t i = 0; i < prompt; ++i) flat.push_back(static_cast<int32_t>((s * 31 + i * 7) % c.vocab_size));
    cu.push_back(static_cast<int32_t>(flat.size()));
  }
  if (!model->forward_cached(**cache, ids, flat, cu).ok()) std::exit(1);
  b->synchronize();
  const auto t0 = Clock::now();
  for (int step = 0; step < steps; ++step) {
    auto logits = model->decode(**cache, ids, next);
    if (!logits.ok()) std::exit(1);
    const std::vector<float> l = to_host_f32(*logits);  // greedy on the host, as a sampler sees it
    for (int64_t s = 0; s < batch; ++s) {
      const float* row = l.data() + s * c.vocab_size;
      next[static_cast<size_t>(s)] = static_cast<int32_t>(std::max_element(row, row + c.vocab_size) - row);
    }
  }
  const double t = seconds_since(t0);
  std::printf("decode: batch %lld, %d steps after a %lld-token prompt: %.0f tokens/s (%.2f ms/step)\n",
              static_cast<long long>(batch), steps, static_cast<long long>(prompt),
              static_cast<double>(batch * steps) / t, 1e3 * t / steps);
}

void bench_weight_sync() {
  const int gpus = cuda::device_count();
  const ModelConfig c = half_billion();
  auto store = make_in_process_store();
  std::vector<double> seconds(static_cast<size_t>(gpus), 0.0);
  std::vector<std::string> errors(static_cast<size_t>(gpus));
  std::vector<std::thread> ranks;
  for (int r = 0; r < gpus; ++r)
    ranks.emplace_back([&, r] {
      auto b = make_gpu(r);
      auto model = make_model(*b);
      GroupOptions g;
      g.name = "bench_weight_sync";
      g.rank = r;
      g.size = gpus;
      auto comm = cuda::make_nccl_communicator(store, g, r);
      if (!comm.ok()) {
        errors[static_cast<size_t>(r)] = comm.status().to_string();
        return;
      }
      const int64_t p = model->weights().flat_size();
      Tensor wire = b->zeros(Shape{p}, DType::kBF16);
      for (int rep = 0; rep < 3; ++rep) {
        b->synchronize();
        const auto t0 = Clock::now();
        if (r == 0) b->convert(wire, model->weights().master_flat());
        b->synchronize();
        rlrun::Status s = (*comm)->broadcast(wire.data(), static_cast<size_t>(p) * 2, CommDType::kU8, 0);
        if (!s.ok()) {
          errors[static_cast<size_t>(r)] = s.to_string();
          return;
        }
        if (r != 0) b->copy(model->weights().compute_flat(), wire);
        b->synchronize();
        seconds[static_cast<size_t>(r)] = seconds_since(t0);  // the last repetition counts
      }
    });
  for (auto& t : ranks) t.join();
  for (const std::string& e : errors)
    if (!e.empty()) std::printf("sync: failed: %s\n", e.c_str());
  const double worst = *std::max_element(seconds.begin(), seconds.end());
  const double params = static_cast<double>(flat_parameter_count(parameter_layout(c)));
  std::printf("sync: %.1f M bf16 parameters to %d rank(s): %.3f s%s\n", params / 1e6,
              gpus, worst, gpus == 1 ? " (one GPU: conversion and copy only, no transfer)" : "");
}

#endif  // RLRUN_HAVE_CUDA

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--steps") o.steps = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--seq-len") o.seq_len = std::max(2, std::atoi(argv[i + 1]));
    else if (flag == "--seqs") o.seqs = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--peak-tflops") o.peak_tflops = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_cuda [--steps N] [--seq-len N] [--seqs N] [--peak-tflops X]\n");
      return 2;
    }
  }
#ifndef RLRUN_HAVE_CUDA
  std::printf("no CUDA device: this build has no CUDA backend (nvcc was absent at configure time)\n");
  return 0;
#else
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device: bench_cuda measures the CUDA backend and needs a GPU (%s)\n",
                cuda::runtime_versions().c_str());
    return 0;
  }
  bench_train(o);
  bench_decode(1, 64);
  bench_decode(64, 64);
  bench_weight_sync();
  return 0;
#endif
}
