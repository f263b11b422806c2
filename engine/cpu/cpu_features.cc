// cpu_features.cc - CPUID and XGETBV (cpu_features.h).
#include "engine/cpu/cpu_features.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

namespace rlrun::engine::cpu {

namespace {

#if defined(__x86_64__) && defined(__GNUC__)

struct Regs {
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(uint32_t leaf, uint32_t subleaf = 0) {
  Regs r;
  if (__get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d) == 0) return {};
  return r;
}

bool bit(uint32_t word, int n) { return (word >> n) & 1u; }

// XCR0: which register states the OS saves on a context switch (0 when XGETBV is unavailable).
uint64_t xcr0() {
  if (!bit(cpuid(1).c, 27)) return 0;  // OSXSAVE
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures read_features() {
  CpuFeatures f;
  const Regs v = cpuid(0);
  char vendor[13] = {};
  std::memcpy(vendor, &v.b, 4);
  std::memcpy(vendor + 4, &v.d, 4);
  std::memcpy(vendor + 8, &v.c, 4);
  f.vendor = vendor;
  if (cpuid(0x80000000).a >= 0x80000004) {
    char brand[49] = {};
    for (uint32_t i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    std::string name = brand;
    const size_t first = name.find_first_not_of(' '), last = name.find_last_not_of(' ');
    f.model_name = first == std::string::npos ? "" : name.substr(first, last - first + 1);
  }
  const uint64_t os = xcr0();
  const bool os_avx = (os & 0x6) == 0x6;            // SSE and AVX state
  const bool os_avx512 = os_avx && (os & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (os & 0x60000) == 0x60000;    // XTILECFG, XTILEDATA
  const Regs l1 = cpuid(1), l7 = v.a >= 7 ? cpuid(7) : Regs{}, l7s1 = v.a >= 7 ? cpuid(7, 1) : Regs{};
  f.fma = os_avx && bit(l1.c, 12);
  f.avx2 = os_avx && bit(l7.b, 5);
  f.avx512f = os_avx512 && bit(l7.b, 16);
  f.avx512dq = os_avx512 && bit(l7.b, 17);
  f.avx512bw = os_avx512 && bit(l7.b, 30);
  f.avx512vl = os_avx512 && bit(l7.b, 31);
  f.avx512_bf16 = os_avx512 && bit(l7s1.a, 5);
  f.amx_bf16 = os_amx && bit(l7.d, 22);
  f.amx_tile = os_amx && bit(l7.d, 24);
  return f;
}

#else

CpuFeatures read_features() { return {}; }

#endif

}  // namespace

std::string CpuFeatures::flags() const {
  std::string out;
  auto add = [&](bool has, const char* name) {
    if (has) out += out.empty() ? name : std::string(" ") + name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512dq, "avx512dq");
  add(avx512vl, "avx512vl");
  add(avx512_bf16, "avx512_bf16");
  add(amx_tile, "amx_tile");
  add(amx_bf16, "amx_bf16");
  return out.empty() ? "none beyond x86-64" : out;
}

std::string CpuFeatures::widest_class() const {
  if (amx_tile && amx_bf16) return "amx";
  if (avx512_core() && avx512_bf16) return "avx512_bf16";
  if (avx512_core()) return "avx512";
  if (avx2 && fma) return "avx2";
  return "sse";
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = read_features();
  return features;
}

bool cpu_has_avx2_fma() { return cpu_features().avx2 && cpu_features().fma; }
bool cpu_has_avx512f() { return cpu_features().avx512f && cpu_features().fma; }

}  // namespace rlrun::engine::cpu
