#include "engine/cuda/matmul.h"

#include <string>

#include "common/check.h"
#include "engine/cuda/cuda_check.h"

namespace rlrun::engine::cuda {

namespace {

void check_cublas(cublasStatus_t status, const char* expr, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) ::rlrun::check_failed(file, line, expr, cublasLtGetStatusString(status));
}
#define CUBLAS_CHECK(call) check_cublas((call), #call, __FILE__, __LINE__)

// Largest power of two (<= 256) dividing the address: cuBLASLt's fast kernels need 16 bytes,
// and row views of a tensor (Tensor::rows) can start anywhere.
int alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// The three descriptors of one call, destroyed on scope exit.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  ~Descriptors() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

Matmul::Matmul(cudaStream_t stream, void* workspace, size_t workspace_bytes)
    : stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Matmul::~Matmul() {
  if (handle_) cublasLtDestroy(handle_);
}

const cublasLtMatmulAlgo_t& Matmul::algo_for(const Key& key, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                                             cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc) {
  auto it = algos_.find(key);
  if (it != algos_.end()) return it->second;
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  // cuBLASLt's "A" is our b and its "B" our a (see matmul.h).
  const uint32_t align_a = static_cast<uint32_t>(std::get<9>(key)), align_b = static_cast<uint32_t>(std::get<8>(key));
  const uint32_t align_c = static_cast<uint32_t>(std::get<10>(key));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                    sizeof align_a));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                    sizeof align_b));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                    sizeof align_c));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                    sizeof align_c));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, op, la, lb, lc, lc, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  RLRUN_CHECK(status == CUBLAS_STATUS_SUCCESS && found > 0,
              std::string("cuBLASLt has no algorithm for matmul m=") + std::to_string(std::get<0>(key)) +
                  " n=" + std::to_string(std::get<1>(key)) + " k=" + std::to_string(std::get<2>(key)) + ": " +
                  cublasLtGetStatusString(status));
  return algos_.emplace(key, result.algo).first->second;
}

void Matmul::run(void* out, cudaDataType_t out_type, const void* a, const void* b, cudaDataType_t ab_type, int64_t m,
                 int64_t n, int64_t k, bool trans_a, bool trans_b, float alpha, float beta) {
  RLRUN_CHECK(k > 0 && m > 0 && n > 0);
  const int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;  // row-major leading dimensions
  Descriptors d;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A = our b
  const cublasOperation_t op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B = our a
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  // Column-major shapes as stored: our b is (ldb-wide rows), i.e. column-major (ldb, rows of b).
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, ab_type, trans_b ? k : n, trans_b ? n : k, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, ab_type, trans_a ? m : k, trans_a ? k : m, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, out_type, n, m, n));
  const Key key{m, n, k, trans_a, trans_b, static_cast<int>(ab_type), static_cast<int>(out_type), beta != 0.0f,
                alignment(a), alignment(b), alignment(out)};
  const cublasLtMatmulAlgo_t& algo = algo_for(key, d.op, d.a, d.b, d.c);
  CUBLAS_CHECK(cublasLtMatmul(handle_, d.op, &alpha, b, d.a, a, d.b, &beta, out, d.c, out, d.c, &algo, workspace_,
                              workspace_bytes_, stream_));
}

}  // namespace rlrun::engine::cuda
