// cpu_fma_peak.h - one core's fp32 peak, measured: independent chains of the widest FMA the CPU
// runs (AVX-512, AVX2), back to back in registers, so no memory and no dependency waits. It is
// the silicon's FMA throughput at the clock it runs now (a Zen 4 core issues one 512-bit FMA per
// cycle, a Sapphire Rapids core two), with no model table.
#pragma once

#include "engine/cpu/cpu_features.h"

namespace rlrun::engine::cpu {

// GFLOP/s (2 per lane per FMA) of one thread, about 20 ms; 0 on a CPU without AVX2 + FMA.
double measure_fma_peak_gflops(const CpuFeatures& cpu);

}  // namespace rlrun::engine::cpu
