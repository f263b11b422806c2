// Built with -ffp-contract=off (engine/CMakeLists.txt): d * q - m must round twice, as the
// reference does, rather than once in a fused multiply-add.
#include "engine/io/gguf_dequant.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "common/check.h"
#include "common/observe/log.h"
#include "engine/bf16.h"

namespace rlrun::engine {
namespace {

constexpr int64_t kBlock = 32;   // QK4_0 ... QK8_0
constexpr int64_t kSuper = 256;  // QK_K

uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
float half_at(const uint8_t* p) { return f16_to_f32(u16_at(p)); }

// ---------------------------------------------------------------- 32-value blocks

void dequantize_q8_0(const uint8_t* in, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, in += 34, out += kBlock) {
    const float d = half_at(in);
    for (int64_t j = 0; j < kBlock; ++j) out[j] = d * static_cast<float>(static_cast<int8_t>(in[2 + j]));
  }
}

void dequantize_q4_0(const uint8_t* in, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, in += 18, out += kBlock) {
    const float d = half_at(in);
    const uint8_t* qs = in + 2;
    for (int64_t j = 0; j < kBlock / 2; ++j) {
      out[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
      out[j + kBlock / 2] = d * static_cast<float>((qs[j] >> 4) - 8);
    }
  }
}

void dequantize_q4_1(const uint8_t* in, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, in += 20, out += kBlock) {
    const float d = half_at(in), m = half_at(in + 2);
    const uint8_t* qs = in + 4;
    for (int64_t j = 0; j < kBlock / 2; ++j) {
      out[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
      out[j + kBlock / 2] = d * static_cast<float>(qs[j] >> 4) + m;
    }
  }
}

// The 5-bit value j of a Q5_0/Q5_1 block: a nibble of qs and bit j of qh.
int q5_value(const uint8_t* qs, uint32_t qh, int64_t j) {
  const int nibble = j < kBlock / 2 ? qs[j] & 0x0F : qs[j - kBlock / 2] >> 4;
  return nibble | static_cast<int>((qh >> j) & 1) << 4;
}

void dequantize_q5_0(const uint8_t* in, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, in += 22, out += kBlock) {
    const float d = half_at(in);
    const uint32_t qh = u32_at(in + 2);
    for (int64_t j = 0; j < kBlock; ++j) out[j] = d * static_cast<float>(q5_value(in + 6, qh, j) - 16);
  }
}

void dequantize_q5_1(const uint8_t* in, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, in += 24, out += kBlock) {
    const float d = half_at(in), m = half_at(in + 2);
    const uint32_t qh = u32_at(in + 4);
    for (int64_t j = 0; j < kBlock; ++j) out[j] = d * static_cast<float>(q5_value(in + 8, qh, j)) + m;
  }
}

// ---------------------------------------------------------------- 256-value super-blocks

void dequantize_q2_k(const uint8_t* in, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, in += 84, out += kSuper) {
    const uint8_t *scales = in, *qs = in + 16;
    const float d = half_at(in + 80), dmin = half_at(in + 82);
    for (int64_t i = 0; i < kSuper; ++i) {
      // i = h*128 + s*32 + j: bits 2s..2s+1 of qs[h*32 + j]; group i / 16
      const int64_t h = i / 128, s = i % 128 / 32, j = i % 32;
      const int q = (qs[h * 32 + j] >> (2 * s)) & 3;
      const uint8_t sc = scales[i / 16];
      const float dl = d * static_cast<float>(sc & 0x0F), ml = dmin * static_cast<float>(sc >> 4);
      out[i] = dl * static_cast<float>(q) - ml;
    }
  }
}

void dequantize_q3_k(const uint8_t* in, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, in += 110, out += kSuper) {
    const uint8_t *hmask = in, *qs = in + 32, *packed = in + 96;
    const float d = half_at(in + 108);
    float dl[16];
    for (int k = 0; k < 16; ++k) {
      // low 4 bits: nibble k / 8 of packed[k % 8]; high 2 bits: bits 2(k/4).. of packed[8 + k % 4]
      const int low = (packed[k % 8] >> (4 * (k / 8))) & 0x0F;
      const int high = (packed[8 + k % 4] >> (2 * (k / 4))) & 0x03;
      dl[k] = d * static_cast<float>((low | high << 4) - 32);
    }
    for (int64_t i = 0; i < kSuper; ++i) {
      const int64_t h = i / 128, s = i % 128 / 32, j = i % 32;
      const int low = (qs[h * 32 + j] >> (2 * s)) & 3;
      const int high = (hmask[j] >> (i / 32)) & 1;  // a clear bit subtracts 4
      out[i] = dl[i / 16] * static_cast<float>(low - (high ^ 1) * 4);
    }
  }
}

// Q4_K/Q5_K's eight 6-bit scales and mins, packed in 12 bytes (ggml's get_scale_min_k4).
void scale_min_k4(const uint8_t* p, uint8_t sc[8], uint8_t mn[8]) {
  for (int k = 0; k < 4; ++k) {
    sc[k] = p[k] & 0x3F;
    mn[k] = p[4 + k] & 0x3F;
    sc[4 + k] = (p[8 + k] & 0x0F) | ((p[k] >> 2) & 0x30);
    mn[4 + k] = (p[8 + k] >> 4) | ((p[4 + k] >> 2) & 0x30);
  }
}

// Q4_K (qh null) and Q5_K: value i = 64c + 32t + j is nibble t of qs[32c + j] (and bit i / 32 of
// qh[j]); group i / 32.
void dequantize_q45_k(const uint8_t* in, const uint8_t* qh, const uint8_t* qs, float* out) {
  const float d = half_at(in), dmin = half_at(in + 2);
  uint8_t sc[8], mn[8];
  scale_min_k4(in + 4, sc, mn);
  for (int k = 0; k < 8; ++k) {
    const float dk = d * static_cast<float>(sc[k]), mk = dmin * static_cast<float>(mn[k]);
    const int64_t c = k / 2, t = k % 2;
    for (int64_t j = 0; j < 32; ++j) {
      int q = (qs[32 * c + j] >> (4 * t)) & 0x0F;
      if (qh != nullptr) q |= ((qh[j] >> k) & 1) << 4;
      out[32 * k + j] = dk * static_cast<float>(q) - mk;
    }
  }
}

void dequantize_q4_k(const uint8_t* in, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, in += 144, out += kSuper) dequantize_q45_k(in, nullptr, in + 16, out);
}

void dequantize_q5_k(const uint8_t* in, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, in += 176, out += kSuper) dequantize_q45_k(in, in + 16, in + 48, out);
}

void dequantize_q6_k(const uint8_t* in, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, in += 210, out += kSuper) {
    const uint8_t *ql = in, *qh = in + 128, *scales = in + 192;
    const float d = half_at(in + 208);
    for (int64_t i = 0; i < kSuper; ++i) {
      // i = h*128 + r, r < 128: low 4 bits nibble r / 64 of ql[64h + r % 64], high 2 bits
      // bits 2(r / 32).. of qh[32h + r % 32]; group i / 16
      const int64_t h = i / 128, r = i % 128;
      const int low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
      const int high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
      const float dl = d * static_cast<float>(static_cast<int8_t>(scales[i / 16]));
      out[i] = dl * static_cast<float>((low | high << 4) - 32);
    }
  }
}

// The first non-finite value, as an error naming the tensor and its block; ok when none.
Status check_finite(const GgufTensor& tensor, const std::vector<float>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if ((std::bit_cast<uint32_t>(values[i]) & 0x7F800000u) != 0x7F800000u) continue;
    const int64_t per_block = ggml_block(tensor.type).elements;
    return invalid_argument(str("tensor `", tensor.name, "` (", ggml_type_name(static_cast<uint32_t>(tensor.type)),
                                "): value ", i, per_block > 1 ? str(" in block ", i / per_block) : std::string(),
                                " is ", values[i], "; a NaN or infinite value or scale cannot be a model weight"));
  }
  return {};
}

// Dequantizes blocks [0, blocks) of `in` (of `type`) into `out`.
void dequantize_blocks(GgmlType type, const uint8_t* in, int64_t blocks, float* out) {
  switch (type) {
    case GgmlType::kF32: std::memcpy(out, in, static_cast<size_t>(blocks) * 4); break;
    case GgmlType::kF16:
      for (int64_t i = 0; i < blocks; ++i) out[i] = f16_to_f32(u16_at(in + 2 * i));
      break;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < blocks; ++i) out[i] = bf16_to_f32(u16_at(in + 2 * i));
      break;
    case GgmlType::kQ8_0: dequantize_q8_0(in, blocks, out); break;
    case GgmlType::kQ4_0: dequantize_q4_0(in, blocks, out); break;
    case GgmlType::kQ4_1: dequantize_q4_1(in, blocks, out); break;
    case GgmlType::kQ5_0: dequantize_q5_0(in, blocks, out); break;
    case GgmlType::kQ5_1: dequantize_q5_1(in, blocks, out); break;
    case GgmlType::kQ2_K: dequantize_q2_k(in, blocks, out); break;
    case GgmlType::kQ3_K: dequantize_q3_k(in, blocks, out); break;
    case GgmlType::kQ4_K: dequantize_q4_k(in, blocks, out); break;
    case GgmlType::kQ5_K: dequantize_q5_k(in, blocks, out); break;
    case GgmlType::kQ6_K: dequantize_q6_k(in, blocks, out); break;
  }
}

}  // namespace

Result<std::vector<float>> dequantize_f32(const GgufTensor& tensor) {
  const int64_t n = tensor.numel();
  const GgmlBlock block = ggml_block(tensor.type);
  RLRUN_CHECK(static_cast<int64_t>(tensor.bytes.size()) == n / block.elements * block.bytes,
              "GgufFile validated the tensor's byte size");
  std::vector<float> out(static_cast<size_t>(n));
  const int64_t blocks = n / block.elements;
  // Chunks of ~64k values on the OpenMP threads: a large model's load is mostly this loop.
  const int64_t per_chunk = std::max<int64_t>(1, (int64_t{1} << 16) / block.elements);
  const int64_t chunks = (blocks + per_chunk - 1) / per_chunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t first = c * per_chunk, count = std::min(per_chunk, blocks - first);
    dequantize_blocks(tensor.type, tensor.bytes.data() + first * block.bytes, count, out.data() + first * block.elements);
  }
  RLRUN_RETURN_IF_ERROR(check_finite(tensor, out));
  return out;
}

}  // namespace rlrun::engine
