// cuda_backend.cc - construction, memory, copies, matmul, elementwise ops and the optimizer.
// The layer ops (embedding, norms, rotary, attention, SwiGLU, log-probs) are in cuda_ops.cc.
// Backend (backend.cc) has checked each op's contract before it gets here.
#include "engine/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "common/check.h"
#include "common/observe/log.h"
#include "engine/cuda/cublaslt_api.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/cuda_virtual_memory.h"
#include "engine/cuda/device.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/matmul.h"

namespace rlrun::engine::cuda {

namespace {

constexpr size_t kMatmulWorkspaceBytes = size_t{32} << 20;

}  // namespace

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(int device) {
  const int count = device_count();
  if (count == 0) return unavailable("no CUDA device: the driver reports none (use backend: cpu here)");
  if (device < 0 || device >= count) {
    return invalid_argument(str("CUDA device ", device, " does not exist (this machine has ", count, ")"));
  }
  CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto vm = make_cuda_virtual_memory(device, stream);
  if (!vm.ok()) {
    cudaStreamDestroy(stream);
    return vm.status();
  }
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  // Address space is cheap: each pool may grow to the whole device (twice for the large pool, so
  // it never runs out of addresses before the device runs out of memory).
  auto allocator = CachingAllocator::create(std::move(vm.value()), total_bytes, 2 * total_bytes);
  if (!allocator.ok()) {
    cudaStreamDestroy(stream);
    return allocator.status();
  }
  return std::unique_ptr<CudaBackend>(new CudaBackend(device, stream, std::move(allocator.value())));
}

Result<std::unique_ptr<Backend>> create_cuda_backend(int device) {
  RLRUN_RETURN_IF_ERROR(load_cublaslt().status());  // an error here, not an abort in the first matmul
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend, CudaBackend::create(device));
  return std::unique_ptr<Backend>(std::move(backend));
}

CudaBackend::CudaBackend(int device, CUstream_st* stream, std::unique_ptr<CachingAllocator> allocator)
    : device_(device), stream_(stream), allocator_(std::move(allocator)) {
  error_flags_ = static_cast<int*>(raw_alloc(sizeof(int)));
  partials_ = static_cast<double*>(raw_alloc(kSumSquaresMaxBlocks * sizeof(double)));
  matmul_workspace_ = raw_alloc(kMatmulWorkspaceBytes);
  matmul_ = std::make_unique<Matmul>(stream_, matmul_workspace_, kMatmulWorkspaceBytes);
}

CudaBackend::~CudaBackend() {
  make_current();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  matmul_.reset();
  for (void* p : {static_cast<void*>(error_flags_), static_cast<void*>(partials_), matmul_workspace_,
                  static_cast<void*>(attention_delta_)})
    raw_free(p);
  allocator_.reset();  // unmaps everything; needs the stream, so before it goes
  CUDA_CHECK(cudaStreamDestroy(stream_));
}

void CudaBackend::make_current() const { CUDA_CHECK(cudaSetDevice(device_)); }

void CudaBackend::check_device_errors() {
  int flags = 0;
  CUDA_CHECK(cudaMemcpyAsync(&flags, error_flags_, sizeof flags, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (flags == 0) return;
  std::string what;
  if (flags & kErrEmbeddingId) what += " embedding_forward/backward: a token id outside [0, vocab);";
  if (flags & kErrLogprobTarget) what += " logprob_forward: a target >= vocab;";
  if (flags & kErrPagedSlot) what += " paged_attention_forward: a block table entry outside the KV cache;";
  if (flags & kErrCuSeqlens) what += " attention: cu_seqlens not increasing from 0 to N, or a sequence > max_seqlen;";
  RLRUN_CHECK(false, name() + ": a kernel flagged bad input:" + what);
}

// ---- memory ---------------------------------------------------------------------------------------

void* CudaBackend::raw_alloc(size_t bytes) {
  make_current();
  Result<void*> p = allocator_->allocate(bytes);
  RLRUN_CHECK(p.ok(), name() + ": " + p.status().message());
  CUDA_CHECK(cudaMemsetAsync(p.value(), 0, bytes, stream_));
  return p.value();
}

void CudaBackend::raw_free(void* ptr) { allocator_->free(ptr); }

// ---- copies -----------------------------------------------------------------------------------------

void CudaBackend::copy_from_host_impl(const Tensor& dst, const void* src, size_t bytes) {
  make_current();
  // From pageable memory this returns once `src` is staged, so the caller may free it at once.
  CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::copy_to_host_impl(void* dst, const Tensor& src, size_t bytes) {
  make_current();
  CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), bytes, cudaMemcpyDeviceToHost, stream_));
  check_device_errors();  // synchronizes
}

void CudaBackend::copy_impl(const Tensor& dst, const Tensor& src) {
  make_current();
  if (src.nbytes() > 0 && dst.data() != src.data())
    CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::fill_zero_impl(const Tensor& t) {
  make_current();
  CUDA_CHECK(cudaMemsetAsync(t.data(), 0, t.nbytes(), stream_));
}

void CudaBackend::convert_impl(const Tensor& dst, const Tensor& src) {
  make_current();
  if (src.dtype() == DType::kF32)  // -> bf16
    convert_f32_to_bf16(static_cast<bf16*>(dst.data()), static_cast<const float*>(src.data()), src.numel(), stream_);
  else  // bf16 -> f32
    convert_bf16_to_f32(static_cast<float*>(dst.data()), static_cast<const bf16*>(src.data()), src.numel(), stream_);
}

void CudaBackend::synchronize() {
  make_current();
  check_device_errors();
}

// ---- dense algebra ------------------------------------------------------------------------------------

void CudaBackend::matmul_impl(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                              float alpha, float beta) {
  const int64_t m = trans_a ? a.shape().cols() : a.shape().rows();
  const int64_t k = trans_a ? a.shape().rows() : a.shape().cols();
  const int64_t n = trans_b ? b.shape().rows() : b.shape().cols();
  make_current();
  const cudaDataType_t ab_type = a.dtype() == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType_t out_type = out.dtype() == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
  matmul_->run(out.data(), out_type, a.data(), b.data(), ab_type, m, n, k, trans_a, trans_b, alpha, beta);
}

void CudaBackend::add_bias_impl(const Tensor& out, const Tensor& bias) {
  const int64_t rows = out.shape().rows(), cols = out.shape().cols();
  make_current();
  cuda::add_bias(static_cast<bf16*>(out.data()), static_cast<const bf16*>(bias.data()), rows, cols, stream_);
}

void CudaBackend::add_bias_backward_impl(const Tensor& dbias, const Tensor& dout) {
  const int64_t rows = dout.shape().rows(), cols = dout.shape().cols();
  make_current();
  cuda::add_bias_backward(static_cast<float*>(dbias.data()), static_cast<const bf16*>(dout.data()), rows, cols,
                          stream_);
}

// ---- elementwise (f32 or bf16) --------------------------------------------------------------------------

void CudaBackend::add_impl(const Tensor& out, const Tensor& a, const Tensor& b) {
  make_current();
  if (out.dtype() == DType::kF32)
    cuda::add(static_cast<float*>(out.data()), static_cast<const float*>(a.data()), static_cast<const float*>(b.data()),
              out.numel(), stream_);
  else  // bf16
    cuda::add(static_cast<bf16*>(out.data()), static_cast<const bf16*>(a.data()), static_cast<const bf16*>(b.data()),
              out.numel(), stream_);
}

void CudaBackend::axpy_impl(const Tensor& y, float alpha, const Tensor& x) {
  make_current();
  if (y.dtype() == DType::kF32)
    cuda::axpy(static_cast<float*>(y.data()), alpha, static_cast<const float*>(x.data()), y.numel(), stream_);
  else  // bf16
    cuda::axpy(static_cast<bf16*>(y.data()), alpha, static_cast<const bf16*>(x.data()), y.numel(), stream_);
}

void CudaBackend::scale_impl(const Tensor& x, float alpha) {
  make_current();
  if (x.dtype() == DType::kF32)
    cuda::scale(static_cast<float*>(x.data()), alpha, x.numel(), stream_);
  else  // bf16
    cuda::scale(static_cast<bf16*>(x.data()), alpha, x.numel(), stream_);
}

// ---- optimizer ---------------------------------------------------------------------------------------------

void CudaBackend::adamw_step_impl(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                                  const AdamWParams& p) {
  const double t = static_cast<double>(p.step);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta2), t));
  make_current();
  cuda::adamw(static_cast<float*>(param.data()), static_cast<const float*>(grad.data()), static_cast<float*>(m.data()),
              static_cast<float*>(v.data()), param.numel(), p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, bc1, bc2,
              stream_);
}

double CudaBackend::sum_squares_impl(const Tensor& x) {
  make_current();
  const int blocks = x.dtype() == DType::kF32
                         ? sum_squares_partials(partials_, static_cast<const float*>(x.data()), x.numel(), stream_)
                         : sum_squares_partials(partials_, static_cast<const bf16*>(x.data()), x.numel(), stream_);
  std::vector<double> host(static_cast<size_t>(blocks));
  if (blocks > 0)
    CUDA_CHECK(cudaMemcpyAsync(host.data(), partials_, host.size() * sizeof(double), cudaMemcpyDeviceToHost, stream_));
  check_device_errors();  // synchronizes
  double total = 0.0;
  for (double v : host) total += v;
  return total;
}

}  // namespace rlrun::engine::cuda
