// Built with -ffp-contract=off (engine/CMakeLists.txt): Q4_1's d * q + m must round twice, as the
// reference does, rather than once in a fused multiply-add.
#include "engine/io/gguf_dequant.h"

#include <cstring>

#include "common/check.h"
#include "engine/bf16.h"

namespace rlrun::engine {
namespace {

constexpr int64_t kBlock = 32;

uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void dequantize_q8_0(const uint8_t* in, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, in += 34, out += kBlock) {
    const float d = f16_to_f32(u16_at(in));
    for (int64_t j = 0; j < kBlock; ++j) out[j] = d * static_cast<float>(static_cast<int8_t>(in[2 + j]));
  }
}

void dequantize_q4_0(const uint8_t* in, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, in += 18, out += kBlock) {
    const float d = f16_to_f32(u16_at(in));
    const uint8_t* qs = in + 2;
    for (int64_t j = 0; j < kBlock / 2; ++j) {
      out[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
      out[j + kBlock / 2] = d * static_cast<float>((qs[j] >> 4) - 8);
    }
  }
}

void dequantize_q4_1(const uint8_t* in, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, in += 20, out += kBlock) {
    const float d = f16_to_f32(u16_at(in));
    const float m = f16_to_f32(u16_at(in + 2));
    const uint8_t* qs = in + 4;
    for (int64_t j = 0; j < kBlock / 2; ++j) {
      out[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
      out[j + kBlock / 2] = d * static_cast<float>(qs[j] >> 4) + m;
    }
  }
}

}  // namespace

std::vector<float> dequantize_f32(const GgufTensor& tensor) {
  const int64_t n = tensor.numel();
  const GgmlBlock block = ggml_block(tensor.type);
  RLRUN_CHECK(static_cast<int64_t>(tensor.bytes.size()) == n / block.elements * block.bytes,
              "GgufFile validated the tensor's byte size");
  std::vector<float> out(static_cast<size_t>(n));
  const uint8_t* in = tensor.bytes.data();
  switch (tensor.type) {
    case GgmlType::kF32: std::memcpy(out.data(), in, out.size() * 4); break;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(u16_at(in + 2 * i));
      break;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(u16_at(in + 2 * i));
      break;
    case GgmlType::kQ8_0: dequantize_q8_0(in, n / kBlock, out.data()); break;
    case GgmlType::kQ4_0: dequantize_q4_0(in, n / kBlock, out.data()); break;
    case GgmlType::kQ4_1: dequantize_q4_1(in, n / kBlock, out.data()); break;
  }
  return out;
}

}  // namespace rlrun::engine
