// common.cuh - device helpers every kernel file shares: bf16 <-> f32, warp reductions, launch sizes.
//
// Kernels read bf16 or f32 through to_f32() and write through from_f32<T>(), so one template body
// serves both dtypes; all arithmetic is f32 (reductions of many terms in f32 or double).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/cuda_check.h"

namespace rlrun::engine::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Blocks for a grid-stride loop over n elements: enough to fill the device, never more than n
// needs (grid.x is capped well below its 2^31 - 1 limit).
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65536 ? 65536 : blocks));
}

}  // namespace rlrun::engine::cuda

namespace rlrun::engine::cuda {

// Raises `kernel`'s dynamic shared-memory limit to `bytes` when that exceeds the 48 KiB default.
// Set on every such launch (a host call of about a microsecond) because the attribute belongs to
// the current device and a process may drive several. A device with less shared memory than
// asked fails here, with file:line, instead of at launch.
template <class Kernel>
void allow_shared_memory(Kernel kernel, size_t bytes) {
  if (bytes <= (48u << 10)) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace rlrun::engine::cuda
