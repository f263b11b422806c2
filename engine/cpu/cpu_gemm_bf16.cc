// cpu_gemm_bf16.cc - bf16 products with fp32 sums through oneDNN's matmul primitive (cpu_gemm.h).
//
// A primitive is built for one shape (oneDNN JIT-compiles its kernel, ~10-25 ms) and kept. The
// rows are a runtime dimension: a training step repeats a few dozen shapes, but the rollout
// engine's rows change with every step's batch, and a primitive per row count made a generation
// step spend its time compiling (10x slower than fp32). So a primitive serves every m of its
// (n, k, layout), and is built once per thread that multiplies it. A weight gradient dY^T X (A
// transposed) sums over the step's tokens, whose count changes every step: k is a runtime dimension
// there too (the same kernel, measured), or each step would build, and keep, new primitives (~1.4
// MB each: a long run's trainer grew by GBs). Past kMaxPrimitives a thread starts its cache anew.
// Primitives, their engine and stream are per thread (thread_local): the backend's threads each
// compute their own blocks of a product, and a primitive's scratchpad is not shared.
#include <oneapi/dnnl/dnnl.hpp>

#include <atomic>
#include <map>
#include <tuple>

#include "common/check.h"
#include "engine/cpu/cpu_gemm.h"

namespace rlrun::engine::cpu {

namespace {

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;  // no m; k < 0: any

// A training step multiplies a few dozen shapes; more means shapes that will not come back.
constexpr size_t kMaxPrimitives = 256;

struct Primitive {
  dnnl::matmul::primitive_desc desc;
  dnnl::matmul matmul;
};

struct ThreadState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Primitive> primitives;
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

std::atomic<int64_t> primitives_built{0};

// A bf16 operand seen as (rows, cols), stored row-major with leading dimension ld, or as its
// transpose (cols rows of ld): B of x W^T is a weight matrix so stored, A of dY^T X a gradient dY.
dnnl::memory::desc bf16_operand(int64_t rows, int64_t cols, bool transposed, int64_t ld) {
  using dnnl::memory;
  return memory::desc({rows, cols}, memory::data_type::bf16, transposed ? memory::dims{1, ld} : memory::dims{ld, 1});
}

// k: DNNL_RUNTIME_DIM_VAL for a primitive that serves every k.
dnnl::matmul::primitive_desc make_desc(const dnnl::engine& engine, bool trans_a, bool trans_b, int64_t n, int64_t k,
                                       int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
  using dnnl::memory;
  const memory::desc a_md = bf16_operand(DNNL_RUNTIME_DIM_VAL, k, trans_a, lda);
  const memory::desc b_md = bf16_operand(k, n, trans_b, ldb);
  const memory::desc c_md({DNNL_RUNTIME_DIM_VAL, n}, memory::data_type::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::desc desc(a_md, b_md, c_md);
  return dnnl::matmul::primitive_desc(desc, attr, engine);
}

Primitive make_primitive(ThreadState& t, bool trans_a, bool trans_b, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                         int64_t ldc, float alpha, float beta) {
  dnnl::matmul::primitive_desc pd = make_desc(t.engine, trans_a, trans_b, n, k, lda, ldb, ldc, alpha, beta);
  return {pd, dnnl::matmul(pd)};
}

}  // namespace

int64_t gemm_bf16_primitives_built() { return primitives_built.load(std::memory_order_relaxed); }

std::string gemm_bf16_implementation() {
  static const std::string names = [] {
    std::string all;
    try {
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      for (bool trans_a : {false, true}) {  // x W^T (rows at run time), dY^T X (k too)
        const int64_t k = trans_a ? DNNL_RUNTIME_DIM_VAL : 256;
        const std::string impl = make_desc(engine, trans_a, !trans_a, 256, k, 256, 256, 256, 1.0f, 0.0f).impl_info_str();
        if (all.find(impl) == std::string::npos) all += (all.empty() ? "" : ", ") + impl;
      }
    } catch (const dnnl::error&) {
      return std::string();
    }
    return all;
  }();
  return names;
}

bool bf16_gemm_native() {
  if (!cpu_features().bf16_instructions() || !gemm_library().bf16_kernels()) return false;
  const std::string impl = gemm_bf16_implementation();
  return !impl.empty() && impl.find("ref") == std::string::npos;  // a reference kernel is slower than fp32
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  try {
    ThreadState& t = thread_state();
    const int64_t key_k = trans_a ? -1 : k;
    const Key key{trans_a, trans_b, n, key_k, lda, ldb, ldc, alpha, beta};
    auto it = t.primitives.find(key);
    if (it == t.primitives.end()) {
      if (t.primitives.size() >= kMaxPrimitives) t.primitives.clear();
      const int64_t k_dim = key_k < 0 ? DNNL_RUNTIME_DIM_VAL : k;
      it = t.primitives.emplace(key, make_primitive(t, trans_a, trans_b, n, k_dim, lda, ldb, ldc, alpha, beta)).first;
      primitives_built.fetch_add(1, std::memory_order_relaxed);
    }
    using dnnl::memory;
    dnnl::memory a_mem(bf16_operand(m, k, trans_a, lda), t.engine, const_cast<uint16_t*>(a));
    dnnl::memory b_mem(bf16_operand(k, n, trans_b, ldb), t.engine, const_cast<uint16_t*>(b));
    dnnl::memory c_mem(memory::desc({m, n}, memory::data_type::f32, memory::dims{ldc, 1}), t.engine, c);
    it->second.matmul.execute(t.stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    t.stream.wait();
  } catch (const dnnl::error& e) {
    RLRUN_CHECK(false, std::string("oneDNN bf16 matmul failed: ") + e.what());
  }
}

}  // namespace rlrun::engine::cpu
