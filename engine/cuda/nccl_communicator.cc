#include "engine/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/observe/log.h"
#include "engine/cuda/cuda_check.h"

namespace rlrun::engine::cuda {

namespace {

using Clock = std::chrono::steady_clock;

Result<ncclDataType_t> nccl_type(CommDType dtype) {
  switch (dtype) {
    case CommDType::kF32: return ncclFloat32;
    case CommDType::kI32: return ncclInt32;
    case CommDType::kU8: return ncclUint8;
  }
  return invalid_argument("unknown CommDType");
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, int device, const GroupOptions& options)
      : comm_(comm), stream_(stream), device_(device), options_(options) {}

  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (comm_ != nullptr) {
      if (failed_)
        ncclCommAbort(comm_);
      else
        ncclCommDestroy(comm_);
    }
    if (barrier_buffer_ != nullptr) cudaFree(barrier_buffer_);
    if (scratch_ != nullptr) cudaFree(scratch_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  Status all_reduce_sum(void* data, size_t count, CommDType dtype) override {
    if (dtype == CommDType::kU8) return invalid_argument("all_reduce_sum: raw bytes cannot be summed");
    RLRUN_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(dtype));
    const size_t bytes = count * comm_dtype_size(dtype);
    return staged(data, bytes, data, bytes, "all_reduce", [&](const void* in, void* out) {
      return ncclAllReduce(in, out, count, type, ncclSum, comm_, stream_);
    });
  }

  Status broadcast(void* data, size_t count, CommDType dtype, int root) override {
    if (root < 0 || root >= size()) return invalid_argument(str("broadcast: root ", root, " not in group"));
    RLRUN_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(dtype));
    const size_t bytes = count * comm_dtype_size(dtype);
    return staged(data, bytes, data, bytes, "broadcast", [&](const void* in, void* out) {
      return ncclBroadcast(in, out, count, type, root, comm_, stream_);
    });
  }

  Status reduce_scatter_sum(const void* in, void* out, size_t count_per_rank, CommDType dtype) override {
    if (dtype == CommDType::kU8) return invalid_argument("reduce_scatter_sum: raw bytes cannot be summed");
    RLRUN_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(dtype));
    const size_t bytes = count_per_rank * comm_dtype_size(dtype);
    return staged(in, bytes * static_cast<size_t>(size()), out, bytes, "reduce_scatter",
                  [&](const void* i, void* o) { return ncclReduceScatter(i, o, count_per_rank, type, ncclSum, comm_, stream_); });
  }

  Status all_gather(const void* in, void* out, size_t count_per_rank, CommDType dtype) override {
    RLRUN_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(dtype));
    const size_t bytes = count_per_rank * comm_dtype_size(dtype);
    return staged(in, bytes, out, bytes * static_cast<size_t>(size()), "all_gather",
                  [&](const void* i, void* o) { return ncclAllGather(i, o, count_per_rank, type, comm_, stream_); });
  }

  // NCCL has no barrier: an all-reduce of one int is one.
  Status barrier() override {
    if (barrier_buffer_ == nullptr) {
      CUDA_CHECK(cudaSetDevice(device_));
      CUDA_CHECK(cudaMalloc(&barrier_buffer_, sizeof(int32_t)));
    }
    return all_reduce_sum(barrier_buffer_, 1, CommDType::kI32);
  }

  // Waits for NCCL's asynchronous work on the communicator (initialisation or a collective) and
  // the stream, until the group's timeout. Aborts the communicator on failure.
  Status wait(const char* what) {
    const auto deadline = Clock::now() + options_.timeout;
    while (true) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) return fail(what, ncclGetErrorString(async));
      if (async == ncclSuccess) {
        const cudaError_t q = cudaStreamQuery(stream_);
        if (q == cudaSuccess) return Status();
        if (q != cudaErrorNotReady) return fail(what, cudaGetErrorString(q));
      }
      if (Clock::now() > deadline) {
        failed_ = true;
        ncclCommAbort(comm_);
        comm_ = nullptr;
        return timeout_error(str(prefix(), what, " did not finish within ", options_.timeout.count(),
                                 " ms (a peer died or is stuck); the group is aborted"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  // Device buffers go to NCCL as they are. Host buffers (the trainer's control values: a loss
  // normaliser, a status every rank must agree on) are copied through a device scratch buffer:
  // `in` (in_bytes) to the device, the collective, then out_bytes back to `out`.
  template <class Fn>
  Status staged(const void* in, size_t in_bytes, void* out, size_t out_bytes, const char* what, Fn&& collective) {
    if (on_device(in) && on_device(out)) return run(what, [&] { return collective(in, out); });
    if (comm_ == nullptr) return unavailable(str(prefix(), what, ": the group was aborted by an earlier failure"));
    CUDA_CHECK(cudaSetDevice(device_));
    const size_t in_at = 0, out_at = (in_bytes + 255) / 256 * 256;  // in and out may alias: separate regions
    if (out_at + out_bytes > scratch_bytes_) {
      if (scratch_ != nullptr) CUDA_CHECK(cudaFree(scratch_));
      scratch_bytes_ = out_at + out_bytes;
      CUDA_CHECK(cudaMalloc(&scratch_, scratch_bytes_));
    }
    char* scratch = static_cast<char*>(scratch_);
    CUDA_CHECK(cudaMemcpy(scratch + in_at, in, in_bytes, cudaMemcpyHostToDevice));
    RLRUN_RETURN_IF_ERROR(run(what, [&] { return collective(scratch + in_at, scratch + out_at); }));
    CUDA_CHECK(cudaMemcpy(out, scratch + out_at, out_bytes, cudaMemcpyDeviceToHost));
    return Status();
  }

  static bool on_device(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();  // an unknown pointer is plain host memory
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }

  template <class Fn>
  Status run(const char* what, Fn&& launch) {
    if (comm_ == nullptr) return unavailable(str(prefix(), what, ": the group was aborted by an earlier failure"));
    CUDA_CHECK(cudaSetDevice(device_));
    const ncclResult_t r = launch();
    if (r != ncclSuccess && r != ncclInProgress) return fail(what, ncclGetErrorString(r));
    return wait(what);
  }

  Status fail(const char* what, const char* error) {
    failed_ = true;
    const std::string last = comm_ != nullptr ? ncclGetLastError(comm_) : "";
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    return unavailable(str(prefix(), what, " failed: ", error, last.empty() ? "" : " (" + last + ")",
                           "; the group is aborted"));
  }

  std::string prefix() const { return str("group `", options_.name, "` rank ", rank(), "/", size(), ": "); }

  ncclComm_t comm_;
  cudaStream_t stream_;
  int device_;
  GroupOptions options_;
  bool failed_ = false;
  void* barrier_buffer_ = nullptr;  // device int for barrier(), allocated on first use
  void* scratch_ = nullptr;         // staging for host buffers, grown on demand
  size_t scratch_bytes_ = 0;
};

}  // namespace

Result<std::unique_ptr<Communicator>> make_nccl_communicator(std::shared_ptr<RendezvousStore> store,
                                                             const GroupOptions& options, int device) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return invalid_argument(str("group `", options.name, "`: rank ", options.rank, " of size ", options.size));
  }
  const std::string key = options.name + "/nccl_unique_id";
  ncclUniqueId id;
  if (options.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return unavailable(str("group `", options.name, "`: ncclGetUniqueId: ", ncclGetErrorString(r)));
    RLRUN_RETURN_IF_ERROR(store->set(key, std::vector<char>(id.internal, id.internal + sizeof id.internal)));
  } else {
    RLRUN_ASSIGN_OR_RETURN(std::vector<char> bytes, store->get(key, options.timeout));
    if (bytes.size() != sizeof id.internal) {
      return protocol_error(str("group `", options.name, "`: NCCL unique id in the store has ", bytes.size(),
                                " bytes, expected ", sizeof id.internal, " (mismatched NCCL versions?)"));
    }
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }
  CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // initialisation and collectives return at once; wait() polls with the timeout
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, options.size, id, options.rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    cudaStreamDestroy(stream);
    return unavailable(str("group `", options.name, "` rank ", options.rank, "/", options.size,
                           ": ncclCommInitRankConfig: ", ncclGetErrorString(r)));
  }
  auto c = std::make_unique<NcclCommunicator>(comm, stream, device, options);
  RLRUN_RETURN_IF_ERROR(c->wait("rendezvous"));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace rlrun::engine::cuda
