// bench_trainer - trainer figures on the CPU backend with the real decoder:
//   * training tokens/s for one rank and for two ranks (threads, Gloo over loopback), plain and
//     with the distributed optimizer, on the same global batch;
//   * weight-send seconds (1 sender -> 1 receiver thread) against the memcpy time of the same
//     bytes measured in the same run (the bound a local send could reach);
//   * trainer memory: the train step's backend peak, and the backend bytes in use during the send
//     with and without weight_broadcast_free_grad_buffers (grads freed for the whole send). The
//     backend's bytes, not the process RSS: sender and receiver share this process.
// On a shared machine the figures are low by the CPU share the run got, printed beside them
// (process CPU seconds / (wall seconds x compute threads)).
// Prints figures; never fails on time.
//
// Usage: bench_trainer [--hidden H] [--layers L] [--vocab V] [--tokens N] [--steps S] [--bucket-mb B]
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "engine/comm/weight_receiver.h"
#include "engine/model/model.h"
#include "trainer/model_adapter.h"
#include "trainer/train_step.h"

using namespace rlrun;
using namespace rlrun::trainer;

namespace {

struct Args {
  int64_t hidden = 256, layers = 4, vocab = 1024, tokens = 1024, steps = 2, bucket_mb = 16;
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

std::unique_ptr<engine::Backend> backend_or_die(int threads) {
  auto b = engine::create_backend("cpu", threads);
  if (!b.ok()) {
    std::fprintf(stderr, "%s\n", b.status().message().c_str());
    std::exit(1);
  }
  return std::move(b).value();
}

std::unique_ptr<engine::Model> model_or_die(engine::Backend& backend, const engine::ModelConfig& c) {
  auto m = engine::Model::create(backend, c);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().message().c_str());
    std::exit(1);
  }
  (*m)->weights().init_random(1, 0.02f);
  return std::move(m).value();
}

// `count` micro-batches of `tokens` tokens each: sequences of 128 (32 prompt + 96 completion).
std::vector<MicroBatch> batches(int64_t count, int64_t tokens, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<MicroBatch> out;
  for (int64_t b = 0; b < count; ++b) {
    std::vector<int32_t> ids, pos, cu{0};
    std::vector<uint8_t> mask;
    std::vector<float> lp, adv;
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t in_seq = t % 128;
      if (in_seq == 0 && t > 0) cu.push_back(static_cast<int32_t>(t));
      if (in_seq == 0) adv.push_back(static_cast<float>(rng() % 3) - 1.0f);
      ids.push_back(static_cast<int32_t>(rng() % vocab));
      pos.push_back(static_cast<int32_t>(in_seq));
      mask.push_back(in_seq >= 32 ? 1 : 0);
      lp.push_back(in_seq >= 32 ? -7.0f : 0.0f);
    }
    cu.push_back(static_cast<int32_t>(tokens));
    out.push_back(std::move(make_micro_batch(ids, pos, cu, mask, adv, lp)).value());
  }
  return out;
}

TrainerOptions trainer_options(bool distributed, const Args& a) {
  TrainerOptions o;
  o.learning_rate = 1e-5;
  o.optimizer.use_distributed_optimizer = distributed;
  o.weight_broadcast_bucket_mb = a.bucket_mb;
  return o;
}

// Global training tokens/s with `ranks` ranks (threads) splitting 4 micro-batches.
double train_tokens_per_second(int ranks, bool distributed, const Args& a, int64_t* peak_bytes, double* cpu_share) {
  const auto all = batches(4, a.tokens, a.vocab, 7);
  auto store = engine::make_in_process_store();
  std::vector<double> seconds(ranks);
  std::vector<int64_t> peaks(ranks);
  std::vector<std::thread> threads;
  static int group = 0;
  const std::string name = "bench" + std::to_string(group++);
  const double cpu_start = process_cpu_seconds();  // includes model setup and warm-up
  const auto wall_start = std::chrono::steady_clock::now();
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<engine::Communicator> comm;
      if (ranks > 1) {
        engine::GroupOptions g;
        g.name = name, g.rank = r, g.size = ranks;
        comm = std::move(engine::make_gloo_communicator(store, g)).value();
      }
      auto backend = backend_or_die(ranks == 1 ? 2 : 1);
      auto model = model_or_die(*backend, config_of(a));
      ModelAdapter adapter(*model);
      auto trainer = std::move(Trainer::create(trainer_options(distributed, a), adapter, comm.get())).value();
      std::vector<MicroBatch> mine;
      for (size_t i = static_cast<size_t>(r); i < all.size(); i += static_cast<size_t>(ranks)) mine.push_back(all[i]);
      (void)trainer->train(mine);  // warm-up
      const auto start = std::chrono::steady_clock::now();
      for (int64_t s = 0; s < a.steps; ++s) {
        auto rep = trainer->train(mine);
        if (!rep.ok()) std::fprintf(stderr, "train: %s\n", rep.status().message().c_str());
      }
      seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      peaks[r] = static_cast<int64_t>(backend->peak_bytes());
    });
  }
  for (auto& t : threads) t.join();
  *peak_bytes = peaks[0];
  *cpu_share = (process_cpu_seconds() - cpu_start) / ((std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                                                      wall_start).count()) * 2.0);
  return static_cast<double>(4 * a.tokens * a.steps) / seconds[0];
}

struct SendFigures {
  double seconds = 0, memcpy_seconds = 0;
  int64_t bytes = 0, in_use_during = 0, in_use_before = 0;
};

// Trainer rank 0 -> one receiver thread, after one train step (so moments and grads exist).
SendFigures send_weights(bool free_grads, const Args& a) {
  SendFigures f;
  auto store = engine::make_in_process_store();
  static int group = 0;
  const std::string name = "bsend" + std::to_string(group++);
  std::thread receiver([&] {
    engine::GroupOptions g;
    g.name = name, g.rank = 1, g.size = 2;
    auto comm = std::move(engine::make_gloo_communicator(store, g)).value();
    auto backend = backend_or_die(1);
    auto model = model_or_die(*backend, config_of(a));
    ModelAdapter adapter(*model);
    engine::WeightReceiver rx(*backend, {adapter.param_specs(), adapter.flat_size(), "f32"}, *comm);
    for (int i = 0; i < 5; ++i) {
      auto r = rx.receive(adapter.params_flat());
      if (!r.ok()) std::fprintf(stderr, "receive: %s\n", r.status().message().c_str());
    }
  });
  engine::GroupOptions g;
  g.name = name, g.rank = 0, g.size = 2;
  auto comm = std::move(engine::make_gloo_communicator(store, g)).value();
  auto backend = backend_or_die(1);
  auto model = model_or_die(*backend, config_of(a));
  ModelAdapter adapter(*model);
  TrainerOptions o = trainer_options(false, a);
  o.weight_broadcast_free_grad_buffers = free_grads;
  auto trainer = std::move(Trainer::create(o, adapter, nullptr, comm.get())).value();
  (void)trainer->train(batches(1, a.tokens, a.vocab, 3));
  (void)trainer->send_weights(0);  // first sync carries the metadata
  f.in_use_before = static_cast<int64_t>(backend->bytes_in_use());
  double best = 1e30;
  for (uint64_t v = 1; v <= 4; ++v) {
    auto r = trainer->send_weights(v);
    if (!r.ok()) {
      std::fprintf(stderr, "send: %s\n", r.status().message().c_str());
      break;
    }
    best = std::min(best, r->seconds);
    f.bytes = r->bytes, f.in_use_during = r->backend_in_use_during;
  }
  receiver.join();
  f.seconds = best;
  std::vector<char> src(static_cast<size_t>(f.bytes), 1), dst(static_cast<size_t>(f.bytes));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) std::memcpy(dst.data(), src.data(), src.size());
  f.memcpy_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 3;
  return f;
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (k == "--hidden") a.hidden = v;
    else if (k == "--layers") a.layers = v;
    else if (k == "--vocab") a.vocab = v;
    else if (k == "--tokens") a.tokens = v;
    else if (k == "--steps") a.steps = v;
    else if (k == "--bucket-mb") a.bucket_mb = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  const engine::ModelConfig c = config_of(a);
  std::printf("model: hidden %ld, %ld layers, vocab %ld: %.2f M parameters; batch 4 x %ld tokens, %ld steps\n",
              (long)c.hidden_size, (long)c.num_layers, (long)c.vocab_size, c.num_parameters() / 1e6, (long)a.tokens,
              (long)a.steps);
  int64_t peak1 = 0, peak2 = 0, peak2d = 0;
  double share1 = 0, share2 = 0, share2d = 0;
  const double t1 = train_tokens_per_second(1, false, a, &peak1, &share1);
  const double t2 = train_tokens_per_second(2, false, a, &peak2, &share2);
  const double t2d = train_tokens_per_second(2, true, a, &peak2d, &share2d);
  std::printf("train  1 rank  (2 threads)            %9.0f tokens/s (CPU share %3.0f%%)   backend peak %7.1f MiB\n", t1,
              100 * share1, mib(peak1));
  std::printf("train  2 ranks (1 thread each)        %9.0f tokens/s (CPU share %3.0f%%)   backend peak %7.1f MiB per rank\n",
              t2, 100 * share2, mib(peak2));
  std::printf("train  2 ranks, distributed optimizer %9.0f tokens/s (CPU share %3.0f%%)   backend peak %7.1f MiB per rank\n",
              t2d, 100 * share2d, mib(peak2d));
  for (bool free_grads : {false, true}) {
    const SendFigures f = send_weights(free_grads, a);
    std::printf("send   %-14s %7.1f MiB in %7.4f s (%6.0f MiB/s) = %5.1fx the memcpy time (%7.4f s); backend in use "
                "during send %7.1f MiB (%7.1f MiB between steps)\n",
                free_grads ? "grads freed" : "grads kept", mib(f.bytes), f.seconds, mib(f.bytes) / f.seconds,
                f.seconds / f.memcpy_seconds, f.memcpy_seconds, mib(f.in_use_during), mib(f.in_use_before));
  }
  return 0;
}
