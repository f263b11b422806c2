// cuda_check.h - every CUDA runtime and driver call is wrapped in a check that reports file:line.
//
// A failed call here is a device failure or a bug, never a user mistake, so it aborts through
// RLRUN_CHECK's handler with the call, the error name and its description. Calls whose failure a
// caller can handle (allocation, NCCL collectives) return Status instead and do not use these.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/check.h"

namespace rlrun::engine::cuda {

inline void check_cuda(cudaError_t err, const char* expr, const char* file, int line) {
  if (err != cudaSuccess) {
    ::rlrun::check_failed(file, line, expr,
                          std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err));
  }
}

}  // namespace rlrun::engine::cuda

#define CUDA_CHECK(call) ::rlrun::engine::cuda::check_cuda((call), #call, __FILE__, __LINE__)
// After a kernel launch: reports a bad launch configuration at the launch site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
