// bench_ops - CPU backend figures: sgemm GFLOP/s for the shapes of a SmolLM2-135M train step,
// packed attention forward/backward tokens/s, and the fused logprob over a 49k vocabulary.
// Each figure is also given as a fraction of the best sgemm rate measured in the same run (the
// bound a CPU op could reach). Prints figures; never fails on time.
//
// Usage: bench_ops [--threads N] [--quick] [--bf16]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"

using namespace rlrun::engine;

namespace {

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int g_threads = 1;
bool g_bf16 = false;  // --bf16
double g_cpu_share_sum = 0.0;  // CPU seconds / (wall seconds * threads), averaged at the end
int g_timed = 0;

// Wall seconds per call: one warm-up, then repeats until ~0.3 s have passed (at least 2 calls).
// Also records what share of the threads' wall time the process really got: on a shared machine
// the figures are low by about that factor.
double time_call(const std::function<void()>& fn) {
  fn();
  int calls = 0;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = process_cpu_seconds();
  double elapsed = 0.0;
  do {
    fn();
    ++calls;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < 0.3 || calls < 2);
  g_cpu_share_sum += (process_cpu_seconds() - cpu_start) / (elapsed * g_threads);
  ++g_timed;
  return elapsed / calls;
}

Tensor random_tensor(Backend& be, Shape shape, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = dist(gen);
  return from_host(be, shape, v);
}

// With --bf16 (compute_dtype: bf16): the backend rounds the f32 operands of each product, as a
// train step's activations and gradients are, while a weight operand (`b_weight`) is bf16 already,
// as the trainer's bf16 copy of its matrices (model/weights.h kBf16Cache); the rounding is timed.
double bench_sgemm(Backend& be, int64_t m, int64_t n, int64_t k, bool ta, bool tb, const char* what,
                   bool b_weight) {
  Tensor a = random_tensor(be, ta ? Shape{k, m} : Shape{m, k}, 1);
  Tensor b = random_tensor(be, tb ? Shape{n, k} : Shape{k, n}, 2);
  if (g_bf16 && b_weight) {
    Tensor b16 = be.zeros(b.shape(), DType::kBF16);
    be.convert(b16, b);
    b = b16;
  }
  Tensor c = be.zeros(Shape{m, n}, DType::kF32);
  const double s = time_call([&] { be.matmul(c, a, b, ta, tb, 1.0f, 0.0f); });
  const double gflops = 2.0 * m * n * k / s / 1e9;
  std::printf("%s %-28s M=%-5ld N=%-6ld K=%-5ld %s%s  %8.2f ms  %7.1f GFLOP/s\n", g_bf16 ? "bf16 " : "sgemm", what,
              (long)m, (long)n, (long)k, ta ? "T" : "N", tb ? "T" : "N", s * 1e3, gflops);
  return gflops;
}

void bench_attention(Backend& be, int64_t num_seqs, int64_t seq_len, int64_t hq, int64_t hkv, int64_t d,
                     double sgemm_peak) {
  const int64_t n = num_seqs * seq_len;
  std::vector<int32_t> cu;
  for (int64_t s = 0; s <= num_seqs; ++s) cu.push_back(static_cast<int32_t>(s * seq_len));
  Tensor q = random_tensor(be, Shape{n, hq, d}, 3), k = random_tensor(be, Shape{n, hkv, d}, 4),
         v = random_tensor(be, Shape{n, hkv, d}, 5), dout = random_tensor(be, Shape{n, hq, d}, 6);
  Tensor cus = from_host_i32(be, Shape{num_seqs + 1}, cu);
  Tensor out = be.zeros(Shape{n, hq, d}, DType::kF32), lse = be.zeros(Shape{n, hq}, DType::kF32);
  Tensor dq = be.zeros(Shape{n, hq, d}, DType::kF32), dk = be.zeros(Shape{n, hkv, d}, DType::kF32),
         dv = be.zeros(Shape{n, hkv, d}, DType::kF32);
  const double fwd = time_call([&] { be.attention_forward(out, lse, q, k, v, cus, seq_len); });
  const double bwd = time_call([&] { be.attention_backward(dq, dk, dv, dout, q, k, v, out, lse, cus, seq_len); });
  // Causal pairs per head; forward does 2 dot-products of length D per pair (QK^T, PV), backward 5.
  const double pairs = static_cast<double>(num_seqs) * seq_len * (seq_len + 1) / 2 * hq;
  const double fwd_gf = 4.0 * pairs * d / fwd / 1e9, bwd_gf = 10.0 * pairs * d / bwd / 1e9;
  std::printf("attention %ldx%ld tokens Hq=%ld Hkv=%ld D=%ld: forward %8.0f tok/s (%5.1f GFLOP/s, %4.2f of sgemm), "
              "backward %8.0f tok/s (%5.1f GFLOP/s, %4.2f of sgemm)\n",
              (long)num_seqs, (long)seq_len, (long)hq, (long)hkv, (long)d, n / fwd, fwd_gf, fwd_gf / sgemm_peak,
              n / bwd, bwd_gf, bwd_gf / sgemm_peak);
}

// One decode step of `batch` sequences, each with `context` cached tokens in blocks of 16
// (the blocks of all sequences interleaved, as a busy cache would have them).
void bench_paged_decode(Backend& be, int64_t batch, int64_t context, int64_t hq, int64_t hkv, int64_t d) {
  const int64_t block = 16, blocks_per_seq = (context + block - 1) / block, slots = batch * blocks_per_seq * block;
  std::vector<int32_t> cu(batch + 1), start(batch, static_cast<int32_t>(context - 1)), tables(batch * blocks_per_seq);
  for (int64_t s = 0; s <= batch; ++s) cu[s] = static_cast<int32_t>(s);
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[s * blocks_per_seq + b] = static_cast<int32_t>(b * batch + s);
  Tensor q = random_tensor(be, Shape{batch, hq, d}, 9), kc = random_tensor(be, Shape{slots, hkv, d}, 10),
         vc = random_tensor(be, Shape{slots, hkv, d}, 11), out = be.zeros(Shape{batch, hq, d}, DType::kF32);
  Tensor tcu = from_host_i32(be, Shape{batch + 1}, cu), tstart = from_host_i32(be, Shape{batch}, start),
         ttab = from_host_i32(be, Shape{batch, blocks_per_seq}, tables);
  const double s = time_call([&] { be.paged_attention_forward(out, q, kc, vc, tcu, tstart, ttab, block, context); });
  const double gb = 2.0 * batch * context * hkv * d * 4 / s / 1e9;  // K and V bytes read
  std::printf("paged decode attention batch %ld, context %ld, Hq=%ld Hkv=%ld D=%ld: %.3f ms per step, %.0f tok/s, "
              "%.1f GB/s of K/V\n",
              (long)batch, (long)context, (long)hq, (long)hkv, (long)d, s * 1e3, batch / s, gb);
}

void bench_logprob(Backend& be, int64_t n, int64_t vocab) {
  Tensor logits = random_tensor(be, Shape{n, vocab}, 7, 5.0f);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7919) % vocab);
  Tensor targets = from_host_i32(be, Shape{n}, t);
  Tensor lp = be.zeros(Shape{n}, DType::kF32), ent = be.zeros(Shape{n}, DType::kF32),
         lse = be.zeros(Shape{n}, DType::kF32), dlp = random_tensor(be, Shape{n}, 8),
         dz = be.zeros(Shape{n, vocab}, DType::kF32);
  const double fwd = time_call([&] { be.logprob_forward(lp, ent, lse, logits, targets); });
  const double bwd = time_call([&] { be.logprob_backward(dz, logits, targets, lse, ent, dlp, dlp); });
  std::printf("logprob+entropy N=%ld V=%ld: forward %8.0f tok/s (%.2f ns/logit), backward %8.0f tok/s (%.2f ns/logit)\n",
              (long)n, (long)vocab, n / fwd, fwd / (n * vocab) * 1e9, n / bwd, bwd / (n * vocab) * 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--bf16") == 0) g_bf16 = true;
  }
  cpu::CpuBackend be(threads);
  if (g_bf16 && !be.set_matmul_bf16(true)) {
    std::fprintf(stderr, "bench_ops: --bf16 needs a CPU that multiplies bf16 natively (AVX512_BF16 or AMX)\n");
    return 2;
  }
  g_threads = be.num_threads();
  std::printf("cpu backend, %d threads, %s kernels\n", be.num_threads(), be.avx2_kernels() ? "AVX2+FMA" : "baseline");
  const int64_t t = quick ? 1024 : 4096;  // tokens in a micro-batch
  double peak = 0.0;
  // SmolLM2-135M: hidden 576, intermediate 1536, vocab 49152.
  peak = std::max(peak, bench_sgemm(be, t, 576, 576, false, true, "q/o proj fwd (x W^T)", true));
  peak = std::max(peak, bench_sgemm(be, t, 1536, 576, false, true, "gate/up proj fwd", true));
  peak = std::max(peak, bench_sgemm(be, t, 576, 1536, false, false, "down proj dx (dy W)", true));
  peak = std::max(peak, bench_sgemm(be, 1536, 576, t, true, false, "down proj dW (dy^T x)", false));
  peak = std::max(peak, bench_sgemm(be, quick ? 256 : 1024, 49152, 576, false, true, "lm head fwd", true));
  peak = std::max(peak, bench_sgemm(be, 512, 512, 512, false, false, "square 512", false));
  bench_attention(be, quick ? 2 : 8, 512, 9, 3, 64, peak);
  bench_attention(be, quick ? 1 : 2, quick ? 1024 : 2048, 9, 3, 64, peak);
  bench_paged_decode(be, 64, quick ? 256 : 1024, 9, 3, 64);
  bench_logprob(be, quick ? 64 : 256, 49152);
  std::printf("the process got %.0f%% of %d thread(s) x wall time (below 100%%: a shared machine; figures low by that factor)\n",
              100.0 * g_cpu_share_sum / g_timed, g_threads);
  return 0;
}
