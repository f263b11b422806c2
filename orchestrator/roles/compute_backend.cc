// compute_backend.cc - a worker's backend from the config (compute_backend.h).
#include "orchestrator/roles/compute_backend.h"

#include "engine/cpu/cpu_gemm.h"

namespace rlrun::orchestrator {

Status check_compute_dtype(const Config& config) {
  if (config.backend != BackendKind::kCpu || config.compute_dtype != ComputeDtype::kBf16) return Status();
  if (engine::cpu::bf16_gemm_native()) return Status();
  const engine::cpu::CpuFeatures& cpu = engine::cpu::cpu_features();
  return invalid_argument(str("compute_dtype: bf16 needs a CPU that multiplies bf16 natively (AVX512_BF16 or AMX); ",
                              cpu.model_name.empty() ? std::string("this CPU") : cpu.model_name, " has ", cpu.flags(),
                              " and ", engine::cpu::gemm_library().name, " runs ", engine::cpu::gemm_library().isa,
                              " kernels here: set compute_dtype: fp32"));
}

Result<std::unique_ptr<engine::Backend>> backend_from_config(const Config& config, int threads) {
  RLRUN_RETURN_IF_ERROR(check_compute_dtype(config));
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<engine::Backend> backend,
                         engine::create_backend(enum_name(config.backend), threads));
  if (config.backend == BackendKind::kCpu && !backend->set_matmul_bf16(config.compute_dtype == ComputeDtype::kBf16))
    return internal_error("the CPU backend refused compute_dtype: bf16 that the CPU check allowed");
  return backend;
}

}  // namespace rlrun::orchestrator
