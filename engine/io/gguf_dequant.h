// gguf_dequant.h - GGUF tensor data to fp32: F32, F16, BF16, the 32-value block types Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0 and the 256-value K-quant super-blocks Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
//
// Block formats (ggml-common.h; d, m, dmin are IEEE halves, byte offsets in the block):
//   Q8_0  34 B: d, int8 q[32]                        x = d * q
//   Q4_0  18 B: d, qs[16]                            x = d * (nibble - 8)
//   Q4_1  20 B: d, m, qs[16]                         x = d * nibble + m
//   Q5_0  22 B: d, u32 qh, qs[16]                    x = d * ((nibble | bit << 4) - 16)
//   Q5_1  24 B: d, m, u32 qh, qs[16]                 x = d * (nibble | bit << 4) + m
//   (value j < 16 is the low nibble of qs[j], 16 + j its high nibble; bit j of qh is value j's)
//   Q2_K  84 B: scales[16], qs[64], d, dmin          16 groups of 16: x = (d * sc) * q - dmin * m
//   Q3_K 110 B: hmask[32], qs[64], scales[12], d     16 groups of 16, 6-bit signed scales
//   Q4_K 144 B: d, dmin, scales[12], qs[128]         8 groups of 32, 6-bit scale and min
//   Q5_K 176 B: d, dmin, scales[12], qh[32], qs[128] as Q4_K with a fifth bit per value
//   Q6_K 210 B: ql[128], qh[64], int8 scales[16], d  16 groups of 16: x = (d * sc) * (q - 32)
// Each product and difference is rounded to fp32 in the order the `gguf` Python package's numpy
// code rounds it (no fused multiply-add), so the values equal its dequantize() bit for bit
// (tests/engine/io/gguf_dequant_test.cc, and the real files in gguf_model_test.cc).
#pragma once

#include <vector>

#include "common/status.h"
#include "engine/io/gguf.h"

namespace rlrun::engine {

// The tensor's values as fp32, in ggml order (row-major for shape()). A value that is not finite
// (a NaN or infinite scale, or such an F32/F16/BF16 value: no real model has one) is an error
// naming the tensor and the block, rather than a model that computes NaN.
Result<std::vector<float>> dequantize_f32(const GgufTensor& tensor);

}  // namespace rlrun::engine
