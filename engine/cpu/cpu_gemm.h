// cpu_gemm.h - the library behind every CPU matrix product: oneDNN (Debian's libdnnl 2.6), the
// library PyTorch computes with on CPUs. Its JIT picks kernels from the CPU's features at run
// time (SSE4.1, AVX2, AVX-512, AVX512_BF16, AMX), so a CPU no table knows yet still runs at its
// speed. OpenBLAS 0.3.21, the library before it, picked kernels by CPU model and fell back to
// SSE3 on a "Intel(R) Xeon(R) Processor" with AVX-512: 39-58 GFLOP/s where the host does 283.
// Side by side on a 2-core AMD EPYC (Zen 4, AVX-512 + AVX512_BF16), 2026-11-28, fp32 GFLOP/s of
// one thread (two) on SmolLM2's training shapes: oneDNN 102-113 (197-217), OpenBLAS at its best
// kernel 98-106 (171-208), OpenBLAS forced to its fallback 39 (70-78), BLIS 0.9 100-103 (it
// runs one thread unless told otherwise). docs/performance.md has the table.
//
// Threads: sgemm() computes on the calling thread alone (CpuBackend splits a product into blocks
// that its threads take as they come free, cpu_backend.h); oneDNN's own threading stays off.
#pragma once

#include <cstdint>
#include <string>

#include "engine/cpu/cpu_features.h"

namespace rlrun::engine::cpu {

// C = alpha op(A) op(B) + beta C for row-major A (m x k, or k x m when trans_a), B (k x n, or n x k
// when trans_b) and C (m x n), with leading dimensions lda, ldb, ldc. beta 0: C is only written.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The bf16 products: C = alpha op(A) op(B) + beta C for bf16 A (m x k row-major, or k x m when
// trans_a) and B (k x n row-major, or n x k when trans_b), with fp32 sums and an fp32 C: twice
// fp32's products per cycle on a CPU that multiplies bf16 natively (AVX512_BF16's VDPBF16PS, AMX
// tiles). Calling thread alone, as sgemm(). Only where bf16_gemm_native() (elsewhere oneDNN would
// emulate it, slower than fp32).
bool bf16_gemm_native();
// oneDNN's implementations of those products as gemm_bf16 builds them (the rows, and a weight
// gradient's k, known only when it runs), e.g. "gemm:jit": bf16_gemm_native() also needs them to
// be JIT kernels, not oneDNN's reference one. "" where oneDNN builds none.
std::string gemm_bf16_implementation();
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);
// oneDNN primitives gemm_bf16 has built (JIT-compiled) in this process, over every thread: one per
// thread and (n, k, layout, alpha, beta), whatever the rows.
int64_t gemm_bf16_primitives_built();

struct GemmLibrary {
  std::string name;  // "oneDNN 2.6.3"
  std::string isa;   // the kernels it runs on this CPU: "avx512_core_bf16", "avx2", ...
  // The class of those kernels in CpuFeatures::widest_class()'s terms ("avx512_bf16", "avx2", ...).
  std::string isa_class;
  // Whether those kernels multiply bf16 natively (avx512_core_bf16 or AMX ones).
  bool bf16_kernels() const { return isa_class == "avx512_bf16" || isa_class == "amx"; }
};
const GemmLibrary& gemm_library();

// True when the library's fp32 kernels are the widest this CPU runs: AVX-512 kernels on an
// AVX-512 CPU, AVX2 kernels on an AVX2 one (bf16 and AMX matter for bf16 products only).
bool gemm_runs_widest_fp32_kernels(const CpuFeatures& cpu, const GemmLibrary& library);

// One thread's speed, measured: the product (512 x 512 x 512 sgemm) against the core's fp32 peak
// (the widest FMA it runs, back to back in registers: what the silicon does at this clock).
struct GemmSpeed {
  double sgemm_gflops = 0;
  double fma_peak_gflops = 0;
  double efficiency() const { return fma_peak_gflops > 0 ? sgemm_gflops / fma_peak_gflops : 0; }
};
// About 60 ms; on a busy host both figures drop together, so their ratio still tells a slow
// kernel from a busy core.
GemmSpeed measure_gemm_speed();

// One line for `rlrun version`, each worker's first log line and profile.json: the CPU, its
// features, the GEMM library and its kernels, and (with `speed`) the measured figures.
std::string describe_compute(const GemmSpeed* speed);

}  // namespace rlrun::engine::cpu
