#include "engine/cuda/cuda_virtual_memory.h"

#include <cuda.h>

#include <string>
#include <vector>

#include "common/check.h"
#include "common/observe/log.h"
#include "engine/cuda/cuda_check.h"

namespace rlrun::engine::cuda {

namespace {

// The driver functions this file uses, resolved at run time (see the header).
struct DriverApi {
  decltype(&cuMemGetAllocationGranularity) get_granularity = nullptr;
  decltype(&cuMemAddressReserve) address_reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuGetErrorName) error_name = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDeviceGetAttribute) device_attribute = nullptr;
};

template <class Fn>
Status resolve(const char* symbol, Fn& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    return unavailable(str("CUDA driver entry point ", symbol, " not found (driver too old?)"));
  }
  fn = reinterpret_cast<Fn>(p);
  return Status();
}

Result<DriverApi> load_driver_api() {
  DriverApi d;
  RLRUN_RETURN_IF_ERROR(resolve("cuMemGetAllocationGranularity", d.get_granularity));
  RLRUN_RETURN_IF_ERROR(resolve("cuMemAddressReserve", d.address_reserve));
  RLRUN_RETURN_IF_ERROR(resolve("cuMemAddressFree", d.address_free));
  RLRUN_RETURN_IF_ERROR(resolve("cuMemCreate", d.create));
  RLRUN_RETURN_IF_ERROR(resolve("cuMemRelease", d.release));
  RLRUN_RETURN_IF_ERROR(resolve("cuMemMap", d.map));
  RLRUN_RETURN_IF_ERROR(resolve("cuMemUnmap", d.unmap));
  RLRUN_RETURN_IF_ERROR(resolve("cuMemSetAccess", d.set_access));
  RLRUN_RETURN_IF_ERROR(resolve("cuGetErrorName", d.error_name));
  RLRUN_RETURN_IF_ERROR(resolve("cuDeviceGet", d.device_get));
  RLRUN_RETURN_IF_ERROR(resolve("cuDeviceGetAttribute", d.device_attribute));
  return d;
}

class CudaVirtualMemory : public VirtualMemory {
 public:
  CudaVirtualMemory(DriverApi api, int device, cudaStream_t stream, size_t granularity)
      : api_(api), device_(device), stream_(stream), granularity_(granularity) {}

  ~CudaVirtualMemory() override {
    RLRUN_CHECK(handles_.empty(), "CudaVirtualMemory destroyed with granules still mapped");
  }

  size_t granularity() const override { return granularity_; }

  Result<uintptr_t> reserve(size_t bytes) override {
    CUdeviceptr ptr = 0;
    const CUresult r = api_.address_reserve(&ptr, bytes, granularity_, 0, 0);
    if (r != CUDA_SUCCESS) {
      return resource_exhausted(str("cuMemAddressReserve of ", bytes, " bytes failed: ", error_name(r)));
    }
    return static_cast<uintptr_t>(ptr);
  }

  void release(uintptr_t base, size_t bytes) override { check(api_.address_free(base, bytes), "cuMemAddressFree"); }

  Status map(uintptr_t addr, size_t bytes) override {
    RLRUN_CHECK(addr % granularity_ == 0 && bytes % granularity_ == 0);
    const CUmemAllocationProp prop = allocation_prop();
    for (size_t off = 0; off < bytes; off += granularity_) {
      CUmemGenericAllocationHandle handle = 0;
      const CUresult r = api_.create(&handle, granularity_, &prop, 0);
      if (r != CUDA_SUCCESS) {
        if (off > 0) unmap_granules(addr, off, /*wait=*/false);  // nothing of this call stays mapped
        if (r == CUDA_ERROR_OUT_OF_MEMORY) return resource_exhausted("cuMemCreate: the device is out of memory");
        check(r, "cuMemCreate");
      }
      check(api_.map(addr + off, granularity_, 0, handle, 0), "cuMemMap");
      handles_[addr + off] = handle;
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check(api_.set_access(addr, bytes, &access, 1), "cuMemSetAccess");
    return Status();
  }

  void unmap(uintptr_t addr, size_t bytes) override { unmap_granules(addr, bytes, /*wait=*/true); }

 private:
  CUmemAllocationProp allocation_prop() const {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    return prop;
  }

  void unmap_granules(uintptr_t addr, size_t bytes, bool wait) {
    if (wait) CUDA_CHECK(cudaStreamSynchronize(stream_));  // kernels may still read these pages
    for (size_t off = 0; off < bytes; off += granularity_) {
      auto it = handles_.find(addr + off);
      RLRUN_CHECK(it != handles_.end(), "unmap of a granule that is not mapped");
      check(api_.unmap(addr + off, granularity_), "cuMemUnmap");
      check(api_.release(it->second), "cuMemRelease");
      handles_.erase(it);
    }
  }

  std::string error_name(CUresult r) const {
    const char* name = nullptr;
    api_.error_name(r, &name);
    return name ? name : "CUDA error " + std::to_string(static_cast<int>(r));
  }

  void check(CUresult r, const char* call) const {
    RLRUN_CHECK(r == CUDA_SUCCESS, std::string(call) + " failed: " + error_name(r));
  }

  DriverApi api_;
  int device_;
  cudaStream_t stream_;
  size_t granularity_;
  std::map<uintptr_t, CUmemGenericAllocationHandle> handles_;  // granule address -> its physical memory
};

}  // namespace

Result<std::unique_ptr<VirtualMemory>> make_cuda_virtual_memory(int device, cudaStream_t stream) {
  RLRUN_ASSIGN_OR_RETURN(DriverApi api, load_driver_api());
  CUdevice dev = 0;
  int supported = 0;
  if (api.device_get(&dev, device) != CUDA_SUCCESS ||
      api.device_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS ||
      !supported) return unavailable(str("CUDA device ", device, " does not support virtual memory management"));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granularity = 0;
  const CUresult r = api.get_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r != CUDA_SUCCESS || granularity == 0) {
    return unavailable(str("cuMemGetAllocationGranularity failed on device ", device));
  }
  return std::unique_ptr<VirtualMemory>(new CudaVirtualMemory(api, device, stream, granularity));
}

}  // namespace rlrun::engine::cuda
