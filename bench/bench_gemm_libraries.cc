// bench_gemm_libraries - the candidates for the CPU's matrix products, side by side on this host:
// oneDNN's sgemm (what rlrun links, engine/cpu/cpu_gemm.h) and its bf16 products (compute_dtype:
// bf16, where the CPU has them), OpenBLAS as the CPU model picks its
// kernels (as installed), OpenBLAS with the kernels its CPUID features call for
// (OPENBLAS_CORETYPE), and BLIS, on SmolLM2-135M's training shapes and 1024^3, at 1 and 2
// threads (the libraries' own threading; rlrun splits products into blocks, cpu_backend.h).
// OpenBLAS and BLIS are loaded with dlopen in a child process each (they export the same cblas
// symbols, and OpenBLAS reads OPENBLAS_CORETYPE when it loads): a library that is not installed is
// reported, not needed (apt-get install libopenblas0-pthread libblis4). Prints GFLOP/s, best of 5,
// with the host's CPU, features and each library's kernels. Never fails on time.
//
// Usage: bench_gemm_libraries [--threads 1,2]
#include <dlfcn.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/bf16.h"
#include "engine/cpu/cpu_features.h"
#include "engine/cpu/cpu_gemm.h"

namespace {

using rlrun::engine::cpu::cpu_features;
using GemmFn = std::function<void(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b,
                                  int ldb, float* c, int ldc)>;

struct Shape {
  const char* name;
  int m, n, k;
  bool ta, tb;
};
// SmolLM2-135M, a micro-batch of 512 tokens: forward x W^T, the input gradient dY W, the weight
// gradient dY^T X (MLP up/down: 576 <-> 1536), and a cube.
constexpr Shape kShapes[] = {
    {"fwd  512x1536x576 (x W^T)", 512, 1536, 576, false, true},
    {"bwd  512x576x1536 (dY W)", 512, 576, 1536, false, false},
    {"wgrd 1536x576x512 (dY^T X)", 1536, 576, 512, true, false},
    {"cube 1024x1024x1024", 1024, 1024, 1024, false, false},
};

double gflops(const GemmFn& gemm, const Shape& s) {
  std::vector<float> a(size_t(s.m) * s.k), b(size_t(s.k) * s.n), c(size_t(s.m) * s.n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 17) * 0.01f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 13) * 0.01f;
  const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  auto run = [&] { gemm(s.ta, s.tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, c.data(), s.n); };
  run();
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    int iterations = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed = 0;
    do {
      run();
      ++iterations;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (elapsed < 0.2);
    best = std::min(best, elapsed / iterations);
  }
  return 2.0 * s.m * s.n * s.k / best / 1e9;
}

void print_row(const std::string& library, int threads, const std::vector<double>& figures) {
  std::printf("| %-40s | %d |", library.c_str(), threads);
  for (double f : figures) std::printf(" %6.1f |", f);
  std::printf("\n");
  std::fflush(stdout);
}

// Runs `measure` in a child (a fresh process loads a library fresh); its row or why not.
void in_child(const std::function<void()>& measure) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    measure();
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
}

// The cblas_sgemm of a library loaded with dlopen, and its kernel's name (OpenBLAS only).
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                            int);
void measure_cblas(const std::string& label, const char* soname, const char* coretype, int threads) {
  in_child([&] {
    if (coretype != nullptr) setenv("OPENBLAS_CORETYPE", coretype, 1);
    setenv("OPENBLAS_NUM_THREADS", std::to_string(threads).c_str(), 1);
    setenv("BLIS_NUM_THREADS", std::to_string(threads).c_str(), 1);
    void* lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      std::printf("| %-40s | %d | not installed (%s) |\n", label.c_str(), threads, soname);
      return;
    }
    auto sgemm = reinterpret_cast<CblasSgemm>(dlsym(lib, "cblas_sgemm"));
    auto corename = reinterpret_cast<char* (*)()>(dlsym(lib, "openblas_get_corename"));
    const std::string name = corename != nullptr ? label + " [" + corename() + "]" : label;
    constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
    GemmFn gemm = [&](bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                      int ldc) {
      sgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
    };
    std::vector<double> figures;
    for (const Shape& s : kShapes) figures.push_back(gflops(gemm, s));
    print_row(name, threads, figures);
  });
}

// OPENBLAS_CORETYPE from the CPU's features alone.
const char* openblas_core_from_features() {
  const auto& f = cpu_features();
  if (f.avx512_core() && f.avx512_bf16) return "Cooperlake";
  if (f.avx512_core()) return "SkylakeX";
  if (f.avx2 && f.fma) return "Haswell";
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0) {
      threads.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        threads.push_back(std::atoi(p));
        p = std::strchr(p, ',') ? std::strchr(p, ',') + 1 : p + std::strlen(p);
      }
    }
  }
  std::printf("host: %s\n\n", rlrun::engine::cpu::describe_compute(nullptr).c_str());
  std::printf("| library | threads |");
  for (const Shape& s : kShapes) std::printf(" %s |", s.name);
  std::printf("\n|---|---|");
  for (size_t i = 0; i < std::size(kShapes); ++i) std::printf("---|");
  std::printf("\n");
  for (int t : threads) {
    in_child([&] {
      omp_set_num_threads(t);  // oneDNN threads a product over omp_get_max_threads()
      GemmFn gemm = [](bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                       float* c, int ldc) {
        // rlrun's sgemm() keeps to one thread; the library's own threading is measured here.
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
      };
      std::vector<double> figures;
      for (const Shape& s : kShapes) figures.push_back(gflops(gemm, s));
      print_row(rlrun::engine::cpu::gemm_library().name + " [" + rlrun::engine::cpu::gemm_library().isa + "]", t,
                figures);
    });
    if (rlrun::engine::cpu::bf16_gemm_native()) {
      in_child([&] {
        omp_set_num_threads(t);
        std::vector<uint16_t> a16, b16;
        GemmFn gemm = [&](bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                          float* c, int ldc) {
          // The operands' rounding to bf16 is timed too, as the backend pays it on every product.
          a16.resize(size_t(m) * k);
          b16.resize(size_t(k) * n);
          for (int i = 0; i < m; ++i)
            for (int p = 0; p < k; ++p) a16[size_t(i) * k + p] = rlrun::engine::f32_to_bf16(ta ? a[size_t(p) * lda + i] : a[size_t(i) * lda + p]);
          for (size_t i = 0; i < b16.size(); ++i) b16[i] = rlrun::engine::f32_to_bf16(b[i]);
          rlrun::engine::cpu::gemm_bf16(false, tb, m, n, k, 1.0f, a16.data(), k, b16.data(), ldb, 0.0f, c, ldc);
        };
        std::vector<double> figures;
        for (const Shape& s : kShapes) figures.push_back(gflops(gemm, s));
        print_row("oneDNN bf16 products, fp32 sums (rounding timed)", t, figures);
      });
    }
    measure_cblas("OpenBLAS as installed", "libopenblas.so.0", nullptr, t);
    if (const char* core = openblas_core_from_features())
      measure_cblas(std::string("OpenBLAS, OPENBLAS_CORETYPE=") + core, "libopenblas.so.0", core, t);
    measure_cblas("OpenBLAS forced to its fallback (Prescott)", "libopenblas.so.0", "Prescott", t);
    measure_cblas("BLIS", "libblis.so.4", nullptr, t);
  }
  return 0;
}
