// backend_info.h - which compute backends this build has, for `rlrun version` and logs.
#pragma once

#include <string>

namespace rlrun::engine {

// The host's CPU, its features, the GEMM library and the kernels it runs here, and one thread's
// measured speed against the core's fp32 peak (engine/cpu/cpu_gemm.h; measuring takes ~60 ms).
// Every computing process logs `summary` first; `rlrun version` prints it.
struct HostCompute {
  std::string summary;
  double sgemm_gflops = 0;     // one thread
  double fma_peak_gflops = 0;  // one core
  bool widest_kernels = true;  // false: the GEMM library runs kernels older than this CPU supports
};
HostCompute measure_host_compute();

bool cuda_backend_built();
int cuda_device_count();  // 0 when the CUDA backend is not built, or no GPU is visible
std::string backend_summary();

}  // namespace rlrun::engine
