// bench_rollout - the rollout worker's engine figures on a ~10M-parameter decoder (CPU backend):
//   1. decode tokens/s with continuous batching vs. the same requests one at a time (mixed output
//      lengths), and the ratio;
//   2. KV-pool utilisation while batching (mean and peak fraction of blocks in use per step);
//   3. weight-update seconds (Gloo broadcast in buckets from a sender thread into the model) next
//      to the memcpy bandwidth measured in the same run.
// Prints figures; never fails on time. Usage: bench_rollout [threads (default 1)] [requests (16)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "common/check.h"
#include "engine/backend.h"
#include "engine/comm/communicator.h"
#include "engine/model/model.h"
#include "rollout/scheduler.h"
#include "rollout/weight_update.h"
#include "trainer/weight_sender.h"

namespace rlrun::rollout {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

engine::ModelConfig bench_config() {
  engine::ModelConfig c;
  c.hidden_size = 384;
  c.num_layers = 6;
  c.num_heads = 6;
  c.num_kv_heads = 2;
  c.intermediate_size = 1024;
  c.vocab_size = 2048;
  c.max_position = 1024;
  return c;
}

std::vector<GenerationRequest> make_requests(int n) {
  std::mt19937 rng(7);
  std::vector<GenerationRequest> out;
  for (int i = 0; i < n; ++i) {
    GenerationRequest r;
    r.request_id = static_cast<uint64_t>(i);
    r.prompt.resize(8 + rng() % 24);
    for (int32_t& t : r.prompt) t = static_cast<int32_t>(rng() % 2048);
    r.max_tokens = 8 + static_cast<int64_t>(rng() % 57);  // mixed: 8 .. 64 tokens
    r.sampling.temperature = 1.0f;
    r.seed = 1;
    out.push_back(std::move(r));
  }
  return out;
}

struct RunFigures {
  int64_t tokens = 0;
  double seconds = 0;
  double mean_kv_utilisation = 0, peak_kv_utilisation = 0;
  int64_t max_batch = 0;
};

// batched: all requests queued at once; otherwise each runs to the end before the next starts.
RunFigures run(engine::Model& model, const std::vector<GenerationRequest>& requests, bool batched) {
  SchedulerOptions o;
  o.max_num_seqs = 16;  // pool sized for 16 sequences of max_model_len
  o.max_model_len = 128;
  o.kv_block_size = 16;
  o.kv_num_blocks = kv_blocks_for_budget(model, o, 0);
  auto s = Scheduler::create(model, o);
  RLRUN_CHECK(s.ok(), s.status().message());
  Scheduler& sched = **s;
  RunFigures f;
  double util_sum = 0;
  int64_t steps = 0;
  const auto start = Clock::now();
  auto drain = [&] {
    while (sched.has_unfinished()) {
      RLRUN_CHECK(sched.step().ok());
      const SchedulerStats st = sched.stats();
      const double u = double(st.kv_blocks_used) / double(st.kv_blocks_total);
      util_sum += u;
      f.peak_kv_utilisation = std::max(f.peak_kv_utilisation, u);
      ++steps;
    }
  };
  for (const GenerationRequest& r : requests) {
    sched.add(r);
    if (!batched) drain();
  }
  drain();
  f.seconds = since(start);
  f.tokens = sched.stats().tokens_generated;
  f.max_batch = sched.stats().max_running;
  f.mean_kv_utilisation = steps > 0 ? util_sum / double(steps) : 0;
  return f;
}

double memcpy_gbps(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, since(t));
  }
  RLRUN_CHECK(b[bytes - 1] == 1);
  return double(bytes) / best / 1e9;
}

void bench_weight_update(engine::Model& model, int threads) {
  const int64_t bucket_bytes = int64_t{4} << 20;
  auto store = engine::make_in_process_store();
  double receive_seconds = 0, send_seconds = 0;
  int64_t bytes = 0, buckets = 0, staging = 0;
  auto member = [&](int rank) {
    engine::GroupOptions g;
    g.name = "bench";
    g.rank = rank;
    g.size = 2;
    auto comm = engine::make_gloo_communicator(store, g);
    RLRUN_CHECK(comm.ok(), comm.status().message());
    if (rank == 0) {
      auto backend = engine::create_backend("cpu", threads);
      auto sender_model = engine::Model::create(**backend, model.config());
      (*sender_model)->weights().init_random(2, 0.02f);
      trainer::WeightSender sender(**backend, engine::flat_layout_of((*sender_model)->weights()), **comm, bucket_bytes);
      for (uint64_t v = 1; v <= 3; ++v) {
        auto r = sender.send((*sender_model)->weights().master_flat(), v);
        RLRUN_CHECK(r.ok(), r.status().message());
        if (v == 3) send_seconds = r->seconds;
      }
    } else {
      WeightUpdater updater(model, **comm);
      for (int v = 1; v <= 3; ++v) {  // the first sync also carries the layout
        const auto t = Clock::now();
        auto r = updater.receive();
        RLRUN_CHECK(r.ok(), r.status().message());
        receive_seconds = since(t);
        bytes = r->bytes;
        buckets = r->buckets;
        staging = r->staging_bytes;
      }
    }
  };
  std::thread t0(member, 0), t1(member, 1);
  t0.join();
  t1.join();
  const double gbps = double(bytes) / receive_seconds / 1e9;
  const double copy = memcpy_gbps(static_cast<size_t>(bytes));
  std::printf("weight update: %.1f MB in %lld buckets of %lld MiB: %.3f s receive (%.3f s send), %.2f GB/s; "
              "memcpy %.2f GB/s; update/memcpy bandwidth %.2f; staging beyond weights %.1f MiB\n",
              double(bytes) / 1e6, static_cast<long long>(buckets), static_cast<long long>(bucket_bytes >> 20),
              receive_seconds, send_seconds, gbps, copy, gbps / copy, double(staging) / (1 << 20));
}

int main_impl(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int num_requests = argc > 2 ? std::atoi(argv[2]) : 16;
  auto backend = engine::create_backend("cpu", threads);
  RLRUN_CHECK(backend.ok(), backend.status().message());
  auto model = engine::Model::create(**backend, bench_config());
  RLRUN_CHECK(model.ok(), model.status().message());
  (*model)->weights().init_random(1, 0.02f);
  std::printf("model: %.1fM parameters, %d CPU thread(s), %d requests, outputs of 8..64 tokens\n",
              double(bench_config().num_parameters()) / 1e6, threads, num_requests);
  const auto requests = make_requests(num_requests);
  const RunFigures one = run(**model, requests, false);
  const RunFigures cb = run(**model, requests, true);
  std::printf("one at a time:       %lld tokens in %.2f s = %.1f tokens/s\n", static_cast<long long>(one.tokens),
              one.seconds, double(one.tokens) / one.seconds);
  std::printf("continuous batching: %lld tokens in %.2f s = %.1f tokens/s (batch up to %lld)\n",
              static_cast<long long>(cb.tokens), cb.seconds, double(cb.tokens) / cb.seconds,
              static_cast<long long>(cb.max_batch));
  std::printf("batching speed-up: %.2fx\n", (double(cb.tokens) / cb.seconds) / (double(one.tokens) / one.seconds));
  std::printf("KV pool while batching: mean %.1f%%, peak %.1f%% of blocks in use\n", 100 * cb.mean_kv_utilisation,
              100 * cb.peak_kv_utilisation);
  bench_weight_update(**model, threads);
  return 0;
}

}  // namespace
}  // namespace rlrun::rollout

int main(int argc, char** argv) { return rlrun::rollout::main_impl(argc, argv); }
