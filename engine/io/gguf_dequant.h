// gguf_dequant.h - GGUF tensor data to fp32 (F32, F16, BF16, Q8_0, Q4_0, Q4_1).
//
// Block formats (ggml-common.h), 32 values per block, `d` and `m` IEEE halves:
//   Q8_0: d, int8 q[32]            x = d * q
//   Q4_0: d, uint8 qs[16]          x = d * (nibble - 8)
//   Q4_1: d, m, uint8 qs[16]       x = d * nibble + m
// where value j < 16 of a block is the low nibble of qs[j] and value 16 + j its high nibble.
// Computed in fp32 in that order without fused multiply-add, so the values equal those of the
// `gguf` Python package's dequantize() bit for bit.
#pragma once

#include <vector>

#include "common/status.h"
#include "engine/io/gguf.h"

namespace rlrun::engine {

// The tensor's values as fp32, in ggml order (row-major for shape()).
std::vector<float> dequantize_f32(const GgufTensor& tensor);

}  // namespace rlrun::engine
