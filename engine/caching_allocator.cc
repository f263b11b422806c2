#include "engine/caching_allocator.h"

#include <algorithm>
#include <cstdio>

#include "common/check.h"
#include "common/observe/log.h"

namespace rlrun::engine {

namespace {

size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

std::string gib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1u << 30));
  return buf;
}

}  // namespace

double AllocatorStats::fragmentation() const {
  const size_t c = cached();
  return c == 0 ? 0.0 : 1.0 - static_cast<double>(largest_free) / static_cast<double>(c);
}

std::string AllocatorStats::str() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "allocated %s (peak %s), reserved %s (peak %s), cached %s, largest free %s, fragmentation %.2f",
                gib(allocated).c_str(), gib(peak_allocated).c_str(), gib(reserved).c_str(), gib(peak_reserved).c_str(),
                gib(cached()).c_str(), gib(largest_free).c_str(), fragmentation());
  return buf;
}

// One expandable segment: addresses [base, base + capacity) reserved, [base, base + mapped)
// backed, and blocks tiling the backed prefix without gaps.
class CachingAllocator::Pool {
 public:
  Pool(const char* name, VirtualMemory& vm, uintptr_t base, size_t capacity)
      : name_(name), vm_(vm), base_(base), capacity_(capacity) {}

  const char* name() const { return name_; }
  uintptr_t base() const { return base_; }
  size_t capacity() const { return capacity_; }
  size_t mapped() const { return mapped_; }
  bool contains(uintptr_t addr) const { return addr >= base_ && addr < base_ + mapped_; }
  size_t largest_free() const { return free_.empty() ? 0 : free_.rbegin()->first; }
  bool all_free() const { return blocks_.size() == free_.size(); }

  // Best fit among the cached blocks, split when larger; 0 when none fits.
  uintptr_t take(size_t rounded, size_t requested) {
    auto it = free_.lower_bound({rounded, 0});
    if (it == free_.end()) return 0;
    const auto [size, offset] = *it;
    free_.erase(it);
    blocks_[offset] = Block{rounded, requested, false};
    if (size > rounded) insert_free(offset + rounded, size - rounded);
    return base_ + offset;
  }

  // Marks the block at addr free and merges it with free neighbours. Returns {size, requested}.
  std::pair<size_t, size_t> release(uintptr_t addr) {
    auto it = blocks_.find(addr - base_);
    RLRUN_CHECK(it != blocks_.end() && !it->second.free,
                std::string("CachingAllocator::free: ") + name_ + " pool never handed out this pointer");
    const std::pair<size_t, size_t> freed{it->second.size, it->second.requested};
    size_t offset = it->first, size = it->second.size;
    auto next = std::next(it);
    if (next != blocks_.end() && next->second.free) {
      size += next->second.size;
      erase_free(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.free) {
        offset = prev->first;
        size += prev->second.size;
        erase_free(prev);
      }
    }
    blocks_.erase(it);
    insert_free(offset, size);
    return freed;
  }

  // Maps enough granules at the end that a block of `rounded` bytes fits (a free tail block is
  // extended). Returns the bytes mapped.
  Result<size_t> grow_for(size_t rounded) {
    size_t tail_free = 0;
    if (!blocks_.empty() && blocks_.rbegin()->second.free) tail_free = blocks_.rbegin()->second.size;
    const size_t grow = round_up(rounded - tail_free, vm_.granularity());
    if (mapped_ + grow > capacity_) {
      return resource_exhausted(str("device allocator: the ", name_, " pool's reserved address range (",
                                    gib(capacity_), ") cannot hold ", gib(mapped_ + grow)));
    }
    RLRUN_RETURN_IF_ERROR(vm_.map(base_ + mapped_, grow));
    if (tail_free > 0) {
      const size_t offset = blocks_.rbegin()->first;
      erase_free(std::prev(blocks_.end()));
      insert_free(offset, tail_free + grow);
    } else {
      insert_free(mapped_, grow);
    }
    mapped_ += grow;
    return grow;
  }

  // Unmaps the whole granules of a free tail block. Returns the bytes unmapped.
  size_t shrink() {
    if (blocks_.empty() || !blocks_.rbegin()->second.free) return 0;
    const size_t start = blocks_.rbegin()->first;
    const size_t cut = round_up(start, vm_.granularity());
    if (cut >= mapped_) return 0;
    vm_.unmap(base_ + cut, mapped_ - cut);
    erase_free(std::prev(blocks_.end()));
    if (cut > start) insert_free(start, cut - start);
    const size_t released = mapped_ - cut;
    mapped_ = cut;
    return released;
  }

 private:
  struct Block {
    size_t size;
    size_t requested;
    bool free;
  };
  void insert_free(size_t offset, size_t size) {
    blocks_[offset] = Block{size, 0, true};
    free_.insert({size, offset});
  }
  void erase_free(std::map<size_t, Block>::iterator it) {
    free_.erase({it->second.size, it->first});
    blocks_.erase(it);
  }

  const char* name_;
  VirtualMemory& vm_;
  uintptr_t base_;
  size_t capacity_;
  size_t mapped_ = 0;
  std::map<size_t, Block> blocks_;            // offset -> block, tiling [0, mapped_)
  std::set<std::pair<size_t, size_t>> free_;  // (size, offset) of the free blocks
};

CachingAllocator::CachingAllocator(std::unique_ptr<VirtualMemory> vm) : vm_(std::move(vm)) {}

Result<std::unique_ptr<CachingAllocator>> CachingAllocator::create(std::unique_ptr<VirtualMemory> vm,
                                                                   size_t small_reserve, size_t large_reserve) {
  RLRUN_CHECK(vm != nullptr);
  const size_t gran = vm->granularity();
  RLRUN_CHECK(gran >= kBlockAlign && gran % kBlockAlign == 0, "granularity " + std::to_string(gran));
  std::unique_ptr<CachingAllocator> a(new CachingAllocator(std::move(vm)));
  small_reserve = round_up(std::max<size_t>(small_reserve, 1), gran);
  large_reserve = round_up(std::max<size_t>(large_reserve, 1), gran);
  RLRUN_ASSIGN_OR_RETURN(uintptr_t small_base, a->vm_->reserve(small_reserve));
  a->small_ = std::make_unique<Pool>("small", *a->vm_, small_base, small_reserve);
  RLRUN_ASSIGN_OR_RETURN(uintptr_t large_base, a->vm_->reserve(large_reserve));
  a->large_ = std::make_unique<Pool>("large", *a->vm_, large_base, large_reserve);
  return a;
}

CachingAllocator::~CachingAllocator() {
  for (Pool* p : {small_.get(), large_.get()}) {
    if (p == nullptr) continue;
    RLRUN_CHECK(p->all_free(), std::string("CachingAllocator destroyed while blocks of its ") + p->name() +
                                   " pool are live (a tensor outlived its backend)");
    if (p->mapped() > 0) vm_->unmap(p->base(), p->mapped());
    vm_->release(p->base(), p->capacity());
  }
}

CachingAllocator::Pool& CachingAllocator::pool_of(size_t rounded) {
  return rounded <= kSmallLimit ? *small_ : *large_;
}

CachingAllocator::Pool* CachingAllocator::pool_holding(uintptr_t addr) {
  if (small_->contains(addr)) return small_.get();
  if (large_->contains(addr)) return large_.get();
  return nullptr;
}

Result<void*> CachingAllocator::allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t rounded = round_up(std::max<size_t>(bytes, 1), kBlockAlign);
  Pool& pool = pool_of(rounded);
  uintptr_t addr = pool.take(rounded, bytes);
  if (addr == 0) {
    Result<size_t> grown = pool.grow_for(rounded);
    if (!grown.ok() && empty_cache_locked() > 0) grown = pool.grow_for(rounded);  // freed granules elsewhere
    if (!grown.ok()) {
      return resource_exhausted(str("out of device memory allocating ", bytes, " bytes (", gib(bytes),
                                    "): allocated ", gib(stats_.allocated), ", reserved ", gib(stats_.reserved),
                                    ", cached ", gib(stats_.cached()), " (", grown.status().message(),
                                    "); lower micro_batch_tokens or enable gradient checkpointing"));
    }
    stats_.reserved += grown.value();
    ++stats_.num_maps;
    addr = pool.take(rounded, bytes);
    RLRUN_CHECK(addr != 0, "a pool grown for a block could not place it");
  }
  stats_.allocated += rounded;
  stats_.requested += bytes;
  ++stats_.num_allocs;
  note_peaks();
  return reinterpret_cast<void*>(addr);
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  Pool* pool = pool_holding(reinterpret_cast<uintptr_t>(ptr));
  RLRUN_CHECK(pool != nullptr, "CachingAllocator::free: pointer outside both pools");
  const auto [size, requested] = pool->release(reinterpret_cast<uintptr_t>(ptr));
  stats_.allocated -= size;
  stats_.requested -= requested;
  ++stats_.num_frees;
}

size_t CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  return empty_cache_locked();
}

size_t CachingAllocator::empty_cache_locked() {
  size_t released = 0;
  for (Pool* p : {small_.get(), large_.get()}) {
    const size_t r = p->shrink();
    if (r > 0) ++stats_.num_unmaps;
    released += r;
  }
  stats_.reserved -= released;
  return released;
}

void CachingAllocator::note_peaks() {
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  AllocatorStats s = stats_;
  s.largest_free = std::max(small_->largest_free(), large_->largest_free());
  return s;
}

}  // namespace rlrun::engine
