#include "engine/backend_info.h"

#ifdef RLRUN_HAVE_CUDA
#include "engine/cuda/device.h"
#endif

namespace rlrun::engine {

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
