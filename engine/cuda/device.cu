#include "engine/cuda/device.h"

#include <cuda_runtime.h>
#include <nccl.h>

namespace rlrun::engine::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  return n;
}

std::string runtime_versions() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  int nccl = 0;
  ncclGetVersion(&nccl);
  return "CUDA runtime " + std::to_string(runtime) + ", NCCL " + std::to_string(nccl / 10000) + "." +
         std::to_string((nccl / 100) % 100) + "." + std::to_string(nccl % 100);
}

}  // namespace rlrun::engine::cuda
