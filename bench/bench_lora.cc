// bench_lora - full fine-tuning against LoRA on the same model and batch, one trainer rank on the
// CPU backend with the real decoder: seconds per trainer step, the backend's peak bytes over the
// steps (weights + gradients + AdamW moments + activations), the bytes one weight sync moves, and
// rollout decode tokens/s with the adapters' low-rank products beside the frozen matmuls against
// the merged model. On a shared machine the figures are low by the CPU share the run got.
// Prints figures; never fails on time.
//
// Usage: bench_lora [--hidden H] [--layers L] [--vocab V] [--tokens N] [--steps S] [--rank R] [--threads T]
// (--steps 0: the decode comparison alone)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "engine/kv/kv_cache.h"
#include "engine/model/lora.h"
#include "engine/model/model.h"
#include "trainer/lora_adapter.h"
#include "trainer/model_adapter.h"
#include "trainer/train_step.h"

using namespace rlrun;
using namespace rlrun::trainer;

namespace {

struct Args {
  int64_t hidden = 512, layers = 4, vocab = 2048, tokens = 1024, steps = 3, rank = 8, threads = 2;
};

engine::ModelConfig config_of(const Args& a) {
  engine::ModelConfig c;
  c.hidden_size = a.hidden;
  c.num_layers = a.layers;
  c.num_heads = a.hidden / 64 > 0 ? a.hidden / 64 : 1;
  c.num_kv_heads = c.num_heads;
  c.intermediate_size = a.hidden * 8 / 3 / 16 * 16;
  c.vocab_size = a.vocab;
  return c;
}

template <typename T>
T or_die(Result<T> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().message().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

// Micro-batches of sequences of 128 tokens (32 prompt + 96 completion), `tokens` each.
std::vector<MicroBatch> batches(int64_t count, const Args& a) {
  std::mt19937 rng(7);
  std::vector<MicroBatch> out;
  for (int64_t b = 0; b < count; ++b) {
    std::vector<int32_t> ids, pos, cu{0};
    std::vector<uint8_t> mask;
    std::vector<float> lp, adv;
    for (int64_t t = 0; t < a.tokens; ++t) {
      const int64_t in_seq = t % 128;
      if (in_seq == 0 && t > 0) cu.push_back(static_cast<int32_t>(t));
      if (in_seq == 0) adv.push_back(static_cast<float>(rng() % 3) - 1.0f);
      ids.push_back(static_cast<int32_t>(rng() % a.vocab));
      pos.push_back(static_cast<int32_t>(in_seq));
      mask.push_back(in_seq >= 32 ? 1 : 0);
      lp.push_back(in_seq >= 32 ? -7.0f : 0.0f);
    }
    cu.push_back(static_cast<int32_t>(a.tokens));
    out.push_back(or_die(make_micro_batch(ids, pos, cu, mask, adv, lp)));
  }
  return out;
}

struct Figures {
  double seconds_per_step = 0, matmul_gflop_per_step = 0, matmul_seconds_per_step = 0;
  int64_t peak_bytes = 0, sync_bytes = 0;
};

// A fresh backend and model per mode, so that each peak is its own.
Figures train(bool lora, const Args& a) {
  auto backend = or_die(engine::create_backend("cpu", static_cast<int>(a.threads)));
  auto model = or_die(engine::Model::create(*backend, config_of(a)));
  model->weights().init_random(1, 0.02f);
  std::unique_ptr<engine::LoraWeights> adapters;
  std::unique_ptr<TrainableModel> trainable;
  if (lora) {
    engine::LoraConfig lc;
    lc.rank = a.rank;
    adapters = or_die(engine::LoraWeights::create(*backend, model->config(), lc));
    adapters->init(1);
    trainable = or_die(LoraModelAdapter::create(*model, *adapters));
  } else {
    trainable = std::make_unique<ModelAdapter>(*model);
  }
  TrainerOptions o;
  o.learning_rate = 1e-5;
  auto trainer = or_die(Trainer::create(o, *trainable, nullptr));
  const auto mbs = batches(2, a);
  (void)trainer->train(mbs);  // warm-up: moments allocated
  const engine::Backend::MatmulStats before = backend->matmul_stats();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < a.steps; ++s) (void)trainer->train(mbs);
  const engine::Backend::MatmulStats after = backend->matmul_stats();
  Figures f;
  const double steps = static_cast<double>(a.steps);
  f.seconds_per_step = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
  f.matmul_gflop_per_step = (after.flops - before.flops) / 1e9 / steps;
  f.matmul_seconds_per_step = (after.seconds - before.seconds) / steps;
  f.peak_bytes = static_cast<int64_t>(backend->peak_bytes());
  f.sync_bytes = trainable->flat_size() * 4;
  return f;
}

// Decode tokens/s of 16 sequences, 64 steps each, after a 32-token prefill: adapters attached
// (low-rank products) or merged into the weights.
double decode_tokens_per_second(bool low_rank, const Args& a) {
  auto backend = or_die(engine::create_backend("cpu", static_cast<int>(a.threads)));
  auto model = or_die(engine::Model::create(*backend, config_of(a)));
  model->weights().init_random(1, 0.02f);
  engine::LoraConfig lc;
  lc.rank = a.rank;
  auto adapters = or_die(engine::LoraWeights::create(*backend, model->config(), lc));
  adapters->init(1);
  if (low_rank) {
    if (!model->attach_lora(adapters.get()).ok()) std::exit(1);
  } else {
    engine::merge_lora(*adapters, model->weights());
  }
  const int64_t seqs = 16, prompt = 32, steps = 64;
  auto cache = or_die(engine::KvCache::create(*backend, engine::KvCacheConfig::for_model(model->config(), 16,
                                                                                          seqs * (prompt + steps) / 16 + seqs)));
  std::vector<engine::SeqId> ids;
  std::vector<int32_t> tokens, cu{0};
  for (int64_t s = 0; s < seqs; ++s) {
    ids.push_back(s);
    if (!cache->add_sequence(s).ok()) std::exit(1);
    for (int64_t t = 0; t < prompt; ++t) tokens.push_back(static_cast<int32_t>((s * 31 + t) % a.vocab));
    cu.push_back(static_cast<int32_t>(tokens.size()));
  }
  (void)or_die(model->forward_cached(*cache, ids, tokens, cu));
  std::vector<int32_t> next(static_cast<size_t>(seqs), 5);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t t = 0; t < steps; ++t) (void)or_die(model->decode(*cache, ids, next));
  return static_cast<double>(seqs * steps) /
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int64_t v = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--hidden")) a.hidden = v;
    else if (!std::strcmp(argv[i], "--layers")) a.layers = v;
    else if (!std::strcmp(argv[i], "--vocab")) a.vocab = v;
    else if (!std::strcmp(argv[i], "--tokens")) a.tokens = v;
    else if (!std::strcmp(argv[i], "--steps")) a.steps = v;
    else if (!std::strcmp(argv[i], "--rank")) a.rank = v;
    else if (!std::strcmp(argv[i], "--threads")) a.threads = v;
  }
  std::printf("bench_lora: hidden %lld, %lld layers, vocab %lld, 2 x %lld tokens per step, rank %lld, %lld threads\n",
              static_cast<long long>(a.hidden), static_cast<long long>(a.layers), static_cast<long long>(a.vocab),
              static_cast<long long>(a.tokens), static_cast<long long>(a.rank), static_cast<long long>(a.threads));
  for (bool lora : {false, true}) {
    if (a.steps == 0) break;  // --steps 0: the decode comparison alone
    const Figures f = train(lora, a);
    std::printf("  %-5s  %.3f s/step (matmuls %.1f GFLOP in %.3f s)  backend peak %.1f MiB  weight sync %.2f MiB\n",
                lora ? "lora" : "full", f.seconds_per_step, f.matmul_gflop_per_step, f.matmul_seconds_per_step,
                static_cast<double>(f.peak_bytes) / (1 << 20), static_cast<double>(f.sync_bytes) / (1 << 20));
  }
  const double merged = decode_tokens_per_second(false, a), low_rank = decode_tokens_per_second(true, a);
  std::printf("  rollout decode, 16 sequences: merged %.0f tokens/s, low-rank beside the frozen matmuls %.0f tokens/s "
              "(%.2fx)\n", merged, low_rank, low_rank / merged);
  return 0;
}
