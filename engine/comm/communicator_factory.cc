// engine/comm/communicator_factory.cc - the one place a group's implementation is chosen.
#include "common/observe/log.h"
#include "engine/comm/communicator.h"
#ifdef RLRUN_HAVE_CUDA
#include "engine/cuda/nccl_communicator.h"
#endif

namespace rlrun::engine {

CommPlacement comm_placement_for(std::string_view backend) {
  return backend == "cuda" || backend.starts_with("cuda:") ? CommPlacement::kCuda : CommPlacement::kHost;
}

Result<std::unique_ptr<Communicator>> make_communicator(std::shared_ptr<RendezvousStore> store,
                                                        const GroupOptions& options) {
  const bool secured = options.security.mechanism != SecurityOptions::Mechanism::kNone;
  if (options.placement == CommPlacement::kHost) {
    return secured ? make_curve_communicator(std::move(store), options) : make_gloo_communicator(std::move(store), options);
  }
  if (secured) {
    return invalid_argument(str("group `", options.name, "`: NCCL cannot be authenticated or encrypted; a group on ",
                                "device buffers runs without security (it relies on the cluster network)"));
  }
#ifdef RLRUN_HAVE_CUDA
  return cuda::make_nccl_communicator(std::move(store), options, options.device);
#else
  return invalid_argument(str("group `", options.name, "`: device buffers need NCCL, and this build has no CUDA ",
                              "(cuda needs nvcc at build time)"));
#endif
}

}  // namespace rlrun::engine
