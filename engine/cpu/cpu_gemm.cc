// cpu_gemm.cc - oneDNN's sgemm, what it runs on this CPU, and how fast (cpu_gemm.h).
#include "engine/cpu/cpu_gemm.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "common/check.h"
#include "engine/cpu/cpu_fma_peak.h"

namespace rlrun::engine::cpu {

namespace {

// oneDNN's ISA names, and their class in CpuFeatures::widest_class()'s terms.
struct IsaName {
  dnnl_cpu_isa_t isa;
  const char* name;
  const char* isa_class;
};
constexpr IsaName kIsaNames[] = {
    {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx", "amx"},
    {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16", "avx512_bf16"},
    {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni", "avx512"},
    {dnnl_cpu_isa_avx512_core, "avx512_core", "avx512"},
    {dnnl_cpu_isa_avx2_vnni, "avx2_vnni", "avx2"},
    {dnnl_cpu_isa_avx2, "avx2", "avx2"},
    {dnnl_cpu_isa_avx, "avx", "sse"},
    {dnnl_cpu_isa_sse41, "sse41", "sse"},
};

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // oneDNN threads a product outside a parallel region over omp_get_max_threads(): one, here.
  if (!omp_in_parallel() && omp_get_max_threads() != 1) omp_set_num_threads(1);
  const dnnl_status_t s = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta,
                                     c, ldc);
  RLRUN_CHECK(s == dnnl_success, "dnnl_sgemm failed with status " + std::to_string(static_cast<int>(s)));
}

const GemmLibrary& gemm_library() {
  static const GemmLibrary library = [] {
    GemmLibrary l;
    const dnnl_version_t* v = dnnl_version();
    l.name = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
    const dnnl_cpu_isa_t effective = dnnl_get_effective_cpu_isa();
    l.isa = "unknown";
    l.isa_class = "sse";
    for (const IsaName& i : kIsaNames) {
      if (effective == i.isa) {
        l.isa = i.name;
        l.isa_class = i.isa_class;
        break;
      }
    }
    return l;
  }();
  return library;
}

bool gemm_runs_widest_fp32_kernels(const CpuFeatures& cpu, const GemmLibrary& library) {
  const auto rank = [](const std::string& c) {
    if (c == "amx" || c == "avx512_bf16" || c == "avx512") return 2;  // fp32 runs AVX-512 kernels in all three
    if (c == "avx2") return 1;
    return 0;
  };
  return rank(library.isa_class) >= rank(cpu.widest_class());
}

GemmSpeed measure_gemm_speed() {
  constexpr int64_t kN = 512;
  std::vector<float> a(kN * kN), b(kN * kN), c(kN * kN);
  for (int64_t i = 0; i < kN * kN; ++i) {
    a[i] = static_cast<float>(i % 17) * 0.01f;
    b[i] = static_cast<float>(i % 13) * 0.01f;
  }
  using Clock = std::chrono::steady_clock;
  double best = 1e30;
  sgemm(false, true, kN, kN, kN, 1.0f, a.data(), kN, b.data(), kN, 0.0f, c.data(), kN);  // JIT, caches
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = Clock::now();
    sgemm(false, true, kN, kN, kN, 1.0f, a.data(), kN, b.data(), kN, 0.0f, c.data(), kN);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  GemmSpeed speed;
  speed.sgemm_gflops = 2.0 * kN * kN * kN / best / 1e9;
  speed.fma_peak_gflops = measure_fma_peak_gflops(cpu_features());
  return speed;
}

std::string describe_compute(const GemmSpeed* speed) {
  const CpuFeatures& cpu = cpu_features();
  const GemmLibrary& lib = gemm_library();
  std::string line = "CPU " + (cpu.model_name.empty() ? std::string("(unnamed)") : cpu.model_name) + " [" + cpu.flags() +
                     "]; GEMM " + lib.name + ", kernels " + lib.isa;
  if (!gemm_runs_widest_fp32_kernels(cpu, lib)) line += " (OLDER than this CPU's " + cpu.widest_class() + ")";
  if (cpu.bf16_instructions()) {
    const std::string bf16 = gemm_bf16_implementation();
    line += " (bf16: " + (bf16.empty() ? std::string("none") : bf16) + (bf16_gemm_native() ? ")" : ", not used)");
  }
  if (speed != nullptr) {
    char figures[160];
    std::snprintf(figures, sizeof figures, "; one thread: sgemm %.0f GFLOP/s = %.0f%% of the core's fp32 peak %.0f GFLOP/s",
                  speed->sgemm_gflops, 100.0 * speed->efficiency(), speed->fma_peak_gflops);
    line += figures;
  }
  return line;
}

}  // namespace rlrun::engine::cpu
