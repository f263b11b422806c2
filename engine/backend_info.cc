#include "engine/backend_info.h"

#include "engine/cpu/cpu_gemm.h"

#ifdef RLRUN_HAVE_CUDA
#include "engine/cuda/device.h"
#endif

namespace rlrun::engine {

HostCompute measure_host_compute() {
  const cpu::GemmSpeed speed = cpu::measure_gemm_speed();
  HostCompute h;
  h.summary = cpu::describe_compute(&speed);
  h.sgemm_gflops = speed.sgemm_gflops;
  h.fma_peak_gflops = speed.fma_peak_gflops;
  h.widest_kernels = cpu::gemm_runs_widest_fp32_kernels(cpu::cpu_features(), cpu::gemm_library());
  return h;
}

#ifdef RLRUN_HAVE_CUDA
bool cuda_backend_built() { return true; }
int cuda_device_count() { return cuda::device_count(); }
std::string backend_summary() {
  return "backends: cpu, cuda (" + cuda::runtime_versions() + "; " + std::to_string(cuda_device_count()) +
         " GPU(s) visible)";
}
#else
bool cuda_backend_built() { return false; }
int cuda_device_count() { return 0; }
std::string backend_summary() { return "backends: cpu (CUDA backend not built)"; }
#endif

}  // namespace rlrun::engine
