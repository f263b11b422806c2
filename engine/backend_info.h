// backend_info.h - which compute backends this build has, for `rlrun version` and logs.
#pragma once

#include <string>

namespace rlrun::engine {

bool cuda_backend_built();
int cuda_device_count();  // 0 when the CUDA backend is not built, or no GPU is visible
std::string backend_summary();

}  // namespace rlrun::engine
