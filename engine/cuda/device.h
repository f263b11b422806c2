// device.h - what the CUDA runtime sees, without exposing CUDA headers to callers.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace rlrun::engine {
class Backend;
}

namespace rlrun::engine::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no GPU (any runtime error counts
// as "no GPU": without a driver cudaGetDeviceCount fails with error 35, with no GPU 100).
int device_count();

// "CUDA runtime 13000, NCCL 2.28.9": linked library versions, available without a GPU.
std::string runtime_versions();

// The CUDA backend on `device` (cuda_backend.h). unavailable ("no CUDA device ...") where there is
// none; invalid_argument for a device number that does not exist.
Result<std::unique_ptr<Backend>> create_cuda_backend(int device);

}  // namespace rlrun::engine::cuda
