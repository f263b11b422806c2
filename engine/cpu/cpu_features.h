// cpu_features.h - what this CPU can run, read from CPUID and from the registers the OS saves
// (XCR0), never from a table of model names: OpenBLAS 0.3.21 knew no "Intel(R) Xeon(R)
// Processor" (a hypervisor's generic name for a Sapphire Rapids) and fell back to its SSE3
// kernels, a third of the machine's speed. Hosts of one machine kind differ (Intel with AVX-512
// and AMX, AMD with AVX2 or AVX-512); only the features tell them apart.
#pragma once

#include <string>

namespace rlrun::engine::cpu {

struct CpuFeatures {
  std::string vendor;      // "GenuineIntel", "AuthenticAMD", ... ("" off x86-64)
  std::string model_name;  // the brand string, as /proc/cpuinfo shows it
  // Each true only when the CPU has it and the OS saves its registers (XCR0).
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512_bf16 = false;          // VDPBF16PS: bf16 products with fp32 sums
  bool amx_tile = false, amx_bf16 = false;

  // The AVX-512 subset every AVX-512 server core has (Skylake-SP on; AMD Zen 4 on).
  bool avx512_core() const { return avx512f && avx512bw && avx512dq && avx512vl; }
  // Instructions that multiply bf16 with fp32 sums (AVX512_BF16's VDPBF16PS, AMX tiles).
  bool bf16_instructions() const { return avx512_bf16 || amx_bf16; }
  // "avx2 fma avx512f avx512bw avx512dq avx512vl avx512_bf16 amx_tile amx_bf16": those present.
  std::string flags() const;
  // The widest class of kernels this CPU runs: "amx", "avx512_bf16", "avx512", "avx2" or "sse".
  std::string widest_class() const;
};

// This CPU's features (read once).
const CpuFeatures& cpu_features();

// True when this CPU runs the AVX2 + FMA variants of the hot loops (cpu_math.h).
bool cpu_has_avx2_fma();
// True when this CPU runs AVX-512F (matmul's few-rows kernel, cpu_gemm_nt.h).
bool cpu_has_avx512f();

}  // namespace rlrun::engine::cpu
