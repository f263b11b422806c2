// cuda_virtual_memory.h - VirtualMemory (engine/caching_allocator.h) over the CUDA driver's virtual
// memory API: cuMemAddressReserve for address ranges; cuMemCreate + cuMemMap + cuMemSetAccess per
// granule to back them; cuMemUnmap + cuMemRelease to give granules back.
//
// Each granule gets its own physical handle, so any granule-aligned sub-range can be unmapped
// (cuMemUnmap must cover whole mappings): the pool's tail can shrink granule by granule. Growing a
// pool by G bytes costs G / granularity driver calls, once; the allocator then caches.
//
// The driver entry points are looked up through cudart (cudaGetDriverEntryPointByVersion) instead
// of linking libcuda: a binary linked against libcuda.so.1 cannot even start on a machine without
// the NVIDIA driver, and rlrun must run (on the CPU backend) there.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>

#include "engine/caching_allocator.h"

namespace rlrun::engine::cuda {

// Fails when the driver lacks the virtual memory API or the device does not support it.
// unmap() waits for `stream` (the backend's only stream) before releasing physical memory.
Result<std::unique_ptr<VirtualMemory>> make_cuda_virtual_memory(int device, cudaStream_t stream);

}  // namespace rlrun::engine::cuda
