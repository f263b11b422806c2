#include "engine/cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <string>

#include "common/observe/log.h"

namespace rlrun::engine::cuda {

namespace {

template <class Fn>
Status resolve(void* lib, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (fn == nullptr) return unavailable(str("libcublasLt has no ", symbol, " (a cuBLAS older than this build's?)"));
  return Status();
}

Result<CublasLtApi> open_cublaslt() {
  const std::string name = str("libcublasLt.so.", CUBLAS_VER_MAJOR);
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr)
    return unavailable(str("cannot open ", name, " (", dlerror(), "): put the CUDA libraries on LD_LIBRARY_PATH"));
  CublasLtApi a{};
  RLRUN_RETURN_IF_ERROR(resolve(lib, "cublasLtCreate", a.create));
  RLRUN_RETURN_IF_ERROR(resolve(lib, "cublasLtDestroy", a.destroy));
  RLRUN_RETURN_IF_ERROR(resolve(lib, "cublasLtGetStatusString", a.status_string));
  RLRUN_RETURN_IF_ERROR(resolve(lib, "cublasLtMatmul", a.matmul));
  RLRUN_RETURN_IF_ERROR(resolve(lib, "cublasLtMatmulAlgoGetHeuristic", a.algo_get_heuristic));
  RLRUN_RETURN_IF_ERROR(resolve(lib, "cublasLtMatmulDescCreate", a.desc_create));
  RLRUN_RETURN_IF_ERROR(resolve(lib, "cublasLtMatmulDescDestroy", a.desc_destroy));
  RLRUN_RETURN_IF_ERROR(resolve(lib, "cublasLtMatmulDescSetAttribute", a.desc_set_attribute));
  RLRUN_RETURN_IF_ERROR(resolve(lib, "cublasLtMatmulPreferenceCreate", a.preference_create));
  RLRUN_RETURN_IF_ERROR(resolve(lib, "cublasLtMatmulPreferenceDestroy", a.preference_destroy));
  RLRUN_RETURN_IF_ERROR(resolve(lib, "cublasLtMatmulPreferenceSetAttribute", a.preference_set_attribute));
  RLRUN_RETURN_IF_ERROR(resolve(lib, "cublasLtMatrixLayoutCreate", a.layout_create));
  RLRUN_RETURN_IF_ERROR(resolve(lib, "cublasLtMatrixLayoutDestroy", a.layout_destroy));
  return a;
}

}  // namespace

Result<const CublasLtApi*> load_cublaslt() {
  static const Result<CublasLtApi> api = open_cublaslt();
  if (!api.ok()) return api.status();
  return &*api;
}

}  // namespace rlrun::engine::cuda
