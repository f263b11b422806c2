// The caching allocator's host logic (engine/caching_allocator.h) over real virtual memory: the
// test double reserves addresses with mmap(PROT_NONE) and "maps" granules with mprotect, so a
// block handed out beyond the mapped range faults, and every test writes the bytes it receives.
#include "engine/caching_allocator.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <random>
#include <vector>

namespace rlrun::engine {
namespace {

constexpr size_t kGran = size_t{2} << 20;  // 2 MiB, like CUDA's
constexpr size_t kMiB = size_t{1} << 20;

// A named test double: host pages standing in for device memory, with a physical budget.
class MmapVirtualMemory : public VirtualMemory {
 public:
  struct Log {
    size_t mapped_now = 0;
    int64_t maps = 0, unmaps = 0, reserves = 0, releases = 0;
  };
  MmapVirtualMemory(size_t budget, Log* log) : budget_(budget), log_(log) {}

  size_t granularity() const override { return kGran; }
  Result<uintptr_t> reserve(size_t bytes) override {
    void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return resource_exhausted("mmap reserve failed");
    ++log_->reserves;
    return reinterpret_cast<uintptr_t>(p);
  }
  void release(uintptr_t base, size_t bytes) override {
    ASSERT_EQ(munmap(reinterpret_cast<void*>(base), bytes), 0);
    ++log_->releases;
  }
  Status map(uintptr_t addr, size_t bytes) override {
    EXPECT_EQ(addr % kGran, 0u);
    EXPECT_EQ(bytes % kGran, 0u);
    if (log_->mapped_now + bytes > budget_) return resource_exhausted("test budget exhausted");
    EXPECT_EQ(mprotect(reinterpret_cast<void*>(addr), bytes, PROT_READ | PROT_WRITE), 0);
    log_->mapped_now += bytes;
    ++log_->maps;
    return Status();
  }
  void unmap(uintptr_t addr, size_t bytes) override {
    EXPECT_EQ(addr % kGran, 0u);
    EXPECT_EQ(bytes % kGran, 0u);
    madvise(reinterpret_cast<void*>(addr), bytes, MADV_DONTNEED);
    EXPECT_EQ(mprotect(reinterpret_cast<void*>(addr), bytes, PROT_NONE), 0);
    log_->mapped_now -= bytes;
    ++log_->unmaps;
  }

 private:
  size_t budget_;
  Log* log_;
};

class CachingAllocatorTest : public ::testing::Test {
 protected:
  void make(size_t budget = size_t{1} << 30, size_t small_reserve = 64 * kMiB, size_t large_reserve = 256 * kMiB) {
    auto a = CachingAllocator::create(std::make_unique<MmapVirtualMemory>(budget, &log_), small_reserve,
                                      large_reserve);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    alloc_ = std::move(a.value());
  }
  void* get(size_t bytes) {
    auto r = alloc_->allocate(bytes);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return nullptr;
    std::memset(r.value(), 0xab, bytes);  // faults if the block is not mapped
    return r.value();
  }

  MmapVirtualMemory::Log log_;
  std::unique_ptr<CachingAllocator> alloc_;
};

TEST_F(CachingAllocatorTest, FreedBlockIsReusedWithoutMappingAgain) {
  make();
  void* a = get(3 * kMiB);
  const int64_t maps = log_.maps;
  alloc_->free(a);
  void* b = get(3 * kMiB);
  EXPECT_EQ(a, b);
  EXPECT_EQ(log_.maps, maps);
  alloc_->free(b);
}

TEST_F(CachingAllocatorTest, GrowsByWholeGranulesAndReportsStats) {
  make();
  void* a = get(3 * kMiB + 1);
  AllocatorStats s = alloc_->stats();
  EXPECT_EQ(s.reserved, 4 * kMiB);  // two granules
  EXPECT_EQ(s.allocated, 3 * kMiB + CachingAllocator::kBlockAlign);
  EXPECT_EQ(s.requested, 3 * kMiB + 1);
  EXPECT_EQ(s.largest_free, 4 * kMiB - s.allocated);
  EXPECT_EQ(s.num_maps, 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % CachingAllocator::kBlockAlign, 0u);
  alloc_->free(a);
  s = alloc_->stats();
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.peak_allocated, 3 * kMiB + CachingAllocator::kBlockAlign);
  EXPECT_EQ(s.largest_free, 4 * kMiB);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.0);
  EXPECT_EQ(s.num_allocs, 1);
  EXPECT_EQ(s.num_frees, 1);
}

TEST_F(CachingAllocatorTest, TailGrowsInPlaceInsteadOfStrandingTheOldBlock) {
  make();
  void* a = get(5 * kMiB);
  alloc_->free(a);
  void* b = get(9 * kMiB);  // bigger than anything cached: the free tail is extended
  EXPECT_EQ(a, b);
  EXPECT_EQ(alloc_->stats().reserved, 10 * kMiB);
  alloc_->free(b);
}

TEST_F(CachingAllocatorTest, BestFitSplitsAndFreeMergesNeighbours) {
  make();
  void* a = get(2 * kMiB);
  void* b = get(4 * kMiB);
  void* c = get(2 * kMiB);
  alloc_->free(b);
  void* d = get(3 * kMiB);  // best fit: b's hole, split
  EXPECT_EQ(d, b);
  alloc_->free(d);
  alloc_->free(a);
  alloc_->free(c);  // a, b, c merge back with the tail into one free block
  const AllocatorStats s = alloc_->stats();
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.largest_free, s.reserved);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.0);
  void* e = get(s.reserved);  // and one block of everything fits without mapping
  EXPECT_EQ(e, a);
  EXPECT_EQ(alloc_->stats().num_maps, s.num_maps);
  alloc_->free(e);
}

TEST_F(CachingAllocatorTest, FragmentationCountsScatteredHoles) {
  make();
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(get(2 * kMiB));
  for (int i = 0; i < 8; i += 2) alloc_->free(blocks[i]);  // four separate 2 MiB holes
  const AllocatorStats s = alloc_->stats();
  EXPECT_EQ(s.cached(), 8 * kMiB);
  EXPECT_EQ(s.largest_free, 2 * kMiB);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.75);
  for (int i = 1; i < 8; i += 2) alloc_->free(blocks[i]);
  EXPECT_DOUBLE_EQ(alloc_->stats().fragmentation(), 0.0);
}

TEST_F(CachingAllocatorTest, SmallRequestsLiveInTheirOwnPool) {
  make();
  void* big = get(4 * kMiB);
  void* small = get(1000);
  void* big2 = get(4 * kMiB);
  // The small block did not land between the two large ones.
  EXPECT_EQ(static_cast<char*>(big2), static_cast<char*>(big) + 4 * kMiB);
  EXPECT_EQ(alloc_->stats().reserved, 8 * kMiB + kGran);
  alloc_->free(small);
  alloc_->free(big);
  alloc_->free(big2);
}

TEST_F(CachingAllocatorTest, OutOfMemoryIsAnErrorNamingTheFiguresAndLeavesTheAllocatorUsable) {
  make(/*budget=*/8 * kMiB);
  void* a = get(6 * kMiB);
  auto r = alloc_->allocate(16 * kMiB);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("out of device memory allocating 16777216 bytes"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("reserved"), std::string::npos);
  alloc_->free(a);
  void* b = get(7 * kMiB);  // the cached 6 MiB tail grows to 8 MiB within the budget
  alloc_->free(b);
}

TEST_F(CachingAllocatorTest, ExhaustionEmptiesTheOtherPoolsCacheAndRetries) {
  make(/*budget=*/8 * kMiB);
  std::vector<void*> smalls;
  for (int i = 0; i < 3; ++i) smalls.push_back(get(kMiB));  // 3 MiB of the small pool: 2 granules
  for (void* p : smalls) alloc_->free(p);                   // cached, still mapped
  void* big = get(6 * kMiB);  // 4 + 6 > 8 MiB: succeeds only by unmapping the small pool's cache
  EXPECT_EQ(alloc_->stats().reserved, 6 * kMiB);
  EXPECT_GE(log_.unmaps, 1);
  alloc_->free(big);
}

TEST_F(CachingAllocatorTest, EmptyCacheUnmapsTheFreeTailOnly) {
  make();
  void* a = get(4 * kMiB);
  void* b = get(4 * kMiB);
  alloc_->free(b);
  EXPECT_EQ(alloc_->empty_cache(), 4 * kMiB);  // b's granules; a stays
  EXPECT_EQ(alloc_->stats().reserved, 4 * kMiB);
  EXPECT_EQ(log_.mapped_now, 4 * kMiB);
  alloc_->free(a);
  EXPECT_EQ(alloc_->empty_cache(), 4 * kMiB);
  EXPECT_EQ(alloc_->stats().reserved, 0u);
  void* c = get(kMiB + 7);  // maps again from scratch
  alloc_->free(c);
}

TEST_F(CachingAllocatorTest, AddressRangeFullIsAnError) {
  make(/*budget=*/size_t{1} << 30, 4 * kMiB, 8 * kMiB);
  auto r = alloc_->allocate(10 * kMiB);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("address range"), std::string::npos) << r.status().message();
}

TEST_F(CachingAllocatorTest, DestructorReturnsEverything) {
  make();
  alloc_->free(get(3 * kMiB));
  alloc_->free(get(100));
  alloc_.reset();
  EXPECT_EQ(log_.mapped_now, 0u);
  EXPECT_EQ(log_.releases, 2);
}

TEST_F(CachingAllocatorTest, FreeingAForeignPointerAborts) {
  make();
  int local = 0;
  EXPECT_DEATH(alloc_->free(&local), "outside both pools");
  void* a = get(kMiB);
  EXPECT_DEATH(alloc_->free(static_cast<char*>(a) + 512), "never handed out");
  alloc_->free(a);
}

// Random allocations and frees, each block filled with its own byte: overlapping blocks or blocks
// outside the mapped range would corrupt a neighbour's pattern or fault.
TEST_F(CachingAllocatorTest, RandomWorkloadKeepsBlocksDisjointAndStatsExact) {
  make(/*budget=*/size_t{1} << 30, 64 * kMiB, 512 * kMiB);
  std::mt19937 gen(7);
  struct Live {
    unsigned char* p;
    size_t n;
    unsigned char tag;
  };
  std::vector<Live> live;
  size_t want_requested = 0;
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || gen() % 100 < 52) {
      const size_t n = gen() % 4 == 0 ? 1 + gen() % (3 * kMiB) : 1 + gen() % 4096;
      auto r = alloc_->allocate(n);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      const auto tag = static_cast<unsigned char>(step);
      std::memset(r.value(), tag, n);
      live.push_back({static_cast<unsigned char*>(r.value()), n, tag});
      want_requested += n;
    } else {
      const size_t i = gen() % live.size();
      for (size_t b = 0; b < live[i].n; b += 97) ASSERT_EQ(live[i].p[b], live[i].tag) << "block overwritten";
      ASSERT_EQ(live[i].p[live[i].n - 1], live[i].tag);
      alloc_->free(live[i].p);
      want_requested -= live[i].n;
      live.erase(live.begin() + static_cast<int64_t>(i));
    }
    if (step % 500 == 0) alloc_->empty_cache();
    const AllocatorStats s = alloc_->stats();
    ASSERT_EQ(s.requested, want_requested);
    ASSERT_LE(s.allocated, s.reserved);
    ASSERT_EQ(s.reserved, log_.mapped_now);
  }
  for (const Live& l : live) alloc_->free(l.p);
  EXPECT_EQ(alloc_->stats().allocated, 0u);
}

}  // namespace
}  // namespace rlrun::engine
