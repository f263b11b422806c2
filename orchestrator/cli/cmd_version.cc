// `rlrun version`: what this binary was built with.
#include <cstdio>

#include "engine/backend_info.h"
#include "orchestrator/cli/commands.h"

namespace rlrun::orchestrator {

int cmd_version(const Args& args) {
  (void)args;
  std::printf("rlrun 0.1.0\n%s\n%s\n", engine::backend_summary().c_str(), engine::measure_host_compute().summary.c_str());
  return kExitOk;
}

}  // namespace rlrun::orchestrator
