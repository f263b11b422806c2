#include "engine/backend.h"

#include <charconv>

#include "common/observe/log.h"
#include "engine/cpu/cpu_backend.h"
#ifdef RLRUN_HAVE_CUDA
#include "engine/cuda/device.h"
#endif

namespace rlrun::engine {

Tensor Backend::zeros(Shape shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  // A zero-byte tensor still gets a distinct block so that data() is never null when defined.
  auto storage = std::make_shared<Storage>(this, raw_alloc(bytes == 0 ? 1 : bytes), bytes == 0 ? 1 : bytes);
  return Tensor(std::move(storage), 0, shape, dtype);
}

std::vector<std::string> available_backends() {
#ifdef RLRUN_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

Result<std::unique_ptr<Backend>> create_backend(std::string_view name, int num_threads) {
  if (name == "cpu") return std::unique_ptr<Backend>(std::make_unique<cpu::CpuBackend>(num_threads));
#ifdef RLRUN_HAVE_CUDA
  // "cuda" is device 0, "cuda:N" device N (a process normally sees one device: CUDA_VISIBLE_DEVICES).
  if (name == "cuda" || name.starts_with("cuda:")) {
    int device = 0;
    if (name != "cuda") {
      const std::string_view digits = name.substr(5);
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), device);
      if (ec != std::errc() || end != digits.data() + digits.size() || device < 0) {
        return invalid_argument(str("compute backend `", name, "`: expected cuda or cuda:N with N a device number"));
      }
    }
    return cuda::create_cuda_backend(device);
  }
  return invalid_argument(str("unknown compute backend `", name, "` (this build has: cpu, cuda)"));
#else
  return invalid_argument(str("unknown compute backend `", name, "` (this build has: cpu; cuda needs nvcc at build time)"));
#endif
}

}  // namespace rlrun::engine
