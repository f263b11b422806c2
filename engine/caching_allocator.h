// caching_allocator.h - a caching device allocator over "expandable segments".
//
// The idea (PyTorch's expandable_segments): reserve one large range of VIRTUAL addresses per pool
// up front and back it with physical memory only as the pool grows, a granule (2 MiB on CUDA) at
// a time, at the end of the mapped range. Blocks are carved from the mapped range best-fit, split
// on allocation and merged with free neighbours on release, and freed blocks stay cached for the
// next allocation instead of going back to the device. Because the range can grow in place, a
// pool never holds several half-empty segments: a large tensor freed and re-requested slightly
// bigger extends the tail instead of stranding the old block (the fragmentation that makes
// per-allocation cudaMalloc caches run out of memory with gigabytes "reserved").
//
// Two pools: allocations up to kSmallLimit (biases, norms, statistics) live in their own range so
// they never pin granules in the middle of the large pool.
//
// Everything here is host logic over an abstract VirtualMemory, so it is unit-tested on the CPU
// with a test double (mmap + mprotect); engine/cuda/ implements VirtualMemory with the CUDA
// virtual memory API (cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemSetAccess).
//
// Ordering contract: a device backend runs every op on ONE stream, in issue order, so a block
// freed on the host may be handed out again at once: work that still reads it was issued earlier
// on the same stream and finishes first. Unmapping is different (the physical pages go away), so
// VirtualMemory::unmap waits for the device itself.
//
// Threads: every method is thread-safe (tensors may be released on any thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "common/status.h"

namespace rlrun::engine {

// Virtual address space and the physical memory behind it, as a device exposes them.
class VirtualMemory {
 public:
  virtual ~VirtualMemory() = default;
  // map/unmap addresses and sizes are multiples of this (bytes).
  virtual size_t granularity() const = 0;
  // A range of `bytes` addresses, not yet usable. Fails when the address space is exhausted.
  virtual Result<uintptr_t> reserve(size_t bytes) = 0;
  virtual void release(uintptr_t base, size_t bytes) = 0;
  // Backs [addr, addr + bytes) with physical memory, readable and writable by the device.
  // resource_exhausted when the device has no memory left (nothing is mapped then).
  virtual Status map(uintptr_t addr, size_t bytes) = 0;
  // Returns the physical memory of [addr, addr + bytes) (a range map() backed earlier) after the
  // device has finished every use of it.
  virtual void unmap(uintptr_t addr, size_t bytes) = 0;
};

struct AllocatorStats {
  size_t allocated = 0;       // bytes in live blocks (sizes rounded up to kBlockAlign)
  size_t requested = 0;       // bytes callers asked for (allocated minus rounding)
  size_t reserved = 0;        // bytes backed by physical memory (both pools)
  size_t peak_allocated = 0;  // maxima since construction
  size_t peak_reserved = 0;
  size_t largest_free = 0;    // the largest cached free block
  int64_t num_allocs = 0;
  int64_t num_frees = 0;
  int64_t num_maps = 0;       // VirtualMemory::map calls (each grows a pool)
  int64_t num_unmaps = 0;

  size_t cached() const { return reserved - allocated; }  // reserved but not handed out
  // External fragmentation of the cache: 1 - largest_free / cached(); 0 when the cached bytes
  // form one block (or there are none), near 1 when they are scattered in small pieces.
  double fragmentation() const;
  std::string str() const;  // one line for logs: "allocated 1.2 GiB (peak ...), reserved ..."
};

class CachingAllocator {
 public:
  static constexpr size_t kBlockAlign = 512;         // every block's size and address
  static constexpr size_t kSmallLimit = size_t{1} << 20;  // requests up to this use the small pool

  // Reserves `small_reserve` and `large_reserve` bytes of addresses (rounded up to granules);
  // nothing is mapped until the first allocation.
  static Result<std::unique_ptr<CachingAllocator>> create(std::unique_ptr<VirtualMemory> vm,
                                                          size_t small_reserve, size_t large_reserve);
  ~CachingAllocator();  // unmaps and releases everything; blocks still live are a caller bug (checked)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (kBlockAlign-aligned, contents undefined). When the pool cannot
  // grow, empties both pools' caches and tries once more before returning resource_exhausted
  // with the figures a user needs (requested, allocated, reserved, cached).
  Result<void*> allocate(size_t bytes);
  // Returns a block to the cache. Aborts on a pointer this allocator did not hand out.
  void free(void* ptr);
  // Unmaps the free granules at the end of each pool (where a pool can shrink); returns the bytes
  // given back to the device.
  size_t empty_cache();
  AllocatorStats stats() const;

 private:
  class Pool;
  CachingAllocator(std::unique_ptr<VirtualMemory> vm);
  Pool& pool_of(size_t rounded);
  Pool* pool_holding(uintptr_t addr);
  size_t empty_cache_locked();
  void note_peaks();

  mutable std::mutex mu_;
  std::unique_ptr<VirtualMemory> vm_;
  std::unique_ptr<Pool> small_, large_;
  AllocatorStats stats_;
};

}  // namespace rlrun::engine
