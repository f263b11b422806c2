// cublaslt_api.h - cuBLASLt opened at run time, not linked.
//
// libcublasLt carries ~94 KiB of static TLS. Linked into rlrun it would be reserved in EVERY
// thread of every process, and a thread created with a small stack then fails: civetweb (the
// /metrics server) starts its threads with 100 KiB stacks, so pthread_create returned EINVAL and
// no run could start. Opened with dlopen only by a process that creates a CUDA backend, it costs
// the others nothing.
#pragma once

#include <cublasLt.h>

#include "common/status.h"

namespace rlrun::engine::cuda {

struct CublasLtApi {
  decltype(&::cublasLtCreate) create;
  decltype(&::cublasLtDestroy) destroy;
  decltype(&::cublasLtGetStatusString) status_string;
  decltype(&::cublasLtMatmul) matmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
  decltype(&::cublasLtMatmulDescCreate) desc_create;
  decltype(&::cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set_attribute;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy;
};

// Opens libcublasLt once (thread-safe) and resolves every entry point; unavailable naming the
// library or symbol when it cannot. The result lives until the process exits.
Result<const CublasLtApi*> load_cublaslt();

}  // namespace rlrun::engine::cuda
