#include "engine/backend.h"

#include "common/log.h"
#include "engine/cpu/cpu_backend.h"

namespace rlrun::engine {

Tensor Backend::zeros(Shape shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  // A zero-byte tensor still gets a distinct block so that data() is never null when defined.
  auto storage = std::make_shared<Storage>(this, raw_alloc(bytes == 0 ? 1 : bytes), bytes == 0 ? 1 : bytes);
  return Tensor(std::move(storage), 0, shape, dtype);
}

std::vector<std::string> available_backends() { return {"cpu"}; }

Result<std::unique_ptr<Backend>> create_backend(std::string_view name, int num_threads) {
  if (name == "cpu") return std::unique_ptr<Backend>(std::make_unique<cpu::CpuBackend>(num_threads));
  return invalid_argument(str("unknown compute backend `", name, "` (this build has: cpu)"));
}

}  // namespace rlrun::engine
