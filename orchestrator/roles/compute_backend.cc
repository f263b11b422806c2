// compute_backend.cc - a worker's backend from the config (compute_backend.h).
#include "orchestrator/roles/compute_backend.h"

#include <string_view>
#include <utility>

#include "common/observe/log.h"
#include "engine/cpu/cpu_gemm.h"

namespace rlrun::orchestrator {

namespace {

// This CPU in words: its model, its flags and the GEMM library's kernels.
std::string describe_cpu() {
  const engine::cpu::CpuFeatures& cpu = engine::cpu::cpu_features();
  return str(cpu.model_name.empty() ? std::string("this CPU") : cpu.model_name, " has ", cpu.flags(), " and ",
             engine::cpu::gemm_library().name, " runs ", engine::cpu::gemm_library().isa, " kernels here");
}

}  // namespace

ComputeDtype pick_compute_dtype(ComputeDtypeChoice asked, bool native) {
  switch (asked) {
    case ComputeDtypeChoice::kFp32: return ComputeDtype::kFp32;
    case ComputeDtypeChoice::kBf16: return ComputeDtype::kBf16;
    case ComputeDtypeChoice::kAuto: break;
  }
  return native ? ComputeDtype::kBf16 : ComputeDtype::kFp32;
}

ComputeDtype effective_compute_dtype(const Config& config) {
  if (config.backend != BackendKind::kCpu) return ComputeDtype::kFp32;
  return pick_compute_dtype(config.compute_dtype, engine::cpu::bf16_gemm_native());
}

bool cpu_bf16_products(const Config& config) { return effective_compute_dtype(config) == ComputeDtype::kBf16; }

std::string describe_compute_dtype(const Config& config) {
  if (config.backend != BackendKind::kCpu) return "compute_dtype: bf16 (backend cuda)";
  const std::string chosen = str("compute_dtype: ", enum_name(effective_compute_dtype(config)));
  if (config.compute_dtype != ComputeDtypeChoice::kAuto) return chosen;
  return str(chosen, engine::cpu::bf16_gemm_native() ? " (auto: bf16 products are native here: "
                                                     : " (auto: no native bf16 products here: ",
             describe_cpu(), ")");
}

Status check_bf16_products(const Config& config, bool native, const std::string& cpu) {
  if (config.backend != BackendKind::kCpu || native) return Status();
  for (const auto& [key, bf16] : {std::pair{"compute_dtype", config.compute_dtype == ComputeDtypeChoice::kBf16},
                                  std::pair{"base_weights_dtype", config.base_weights_dtype == ComputeDtype::kBf16}}) {
    if (bf16)
      return invalid_argument(str(key, ": bf16 needs a CPU that multiplies bf16 natively (AVX512_BF16 or AMX); ", cpu,
                                  ": set ", key, std::string_view(key) == "compute_dtype" ? ": fp32 or auto" : ": fp32"));
  }
  return Status();
}

Status check_compute_dtype(const Config& config) {
  if (config.backend != BackendKind::kCpu) return Status();
  if (config.compute_dtype != ComputeDtypeChoice::kBf16 && config.base_weights_dtype != ComputeDtype::kBf16)
    return Status();
  return check_bf16_products(config, engine::cpu::bf16_gemm_native(), describe_cpu());
}

bool bf16_frozen_weights(const Config& config) {
  return config.backend == BackendKind::kCpu &&
         (config.base_weights_dtype == ComputeDtype::kBf16 || cpu_bf16_products(config));
}

engine::WeightStorage frozen_weight_storage(const Config& config) {
  return bf16_frozen_weights(config) ? engine::WeightStorage::kBf16Frozen : engine::WeightStorage::kF32;
}

engine::WeightStorage trained_weight_storage(const Config& config) {
  return cpu_bf16_products(config) ? engine::WeightStorage::kBf16Cache : engine::WeightStorage::kF32;
}

Result<std::unique_ptr<engine::Backend>> backend_from_config(const Config& config, int threads) {
  RLRUN_RETURN_IF_ERROR(check_compute_dtype(config));
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<engine::Backend> backend,
                         engine::create_backend(enum_name(config.backend), threads));
  if (config.backend == BackendKind::kCpu && !backend->set_matmul_bf16(cpu_bf16_products(config)))
    return internal_error("the CPU backend refused compute_dtype: bf16 that the CPU check allowed");
  log::info(describe_compute_dtype(config));
  return backend;
}

}  // namespace rlrun::orchestrator
