// `rlrun convert IN.gguf OUT_DIR`: a llama GGUF file as an HF model folder (engine/io/gguf_convert.h).
#include <chrono>
#include <cstdio>

#include "common/observe/log.h"
#include "engine/io/gguf_convert.h"
#include "orchestrator/cli/cli_args.h"

namespace rlrun::orchestrator {

int cmd_convert(const Args& args) {
  if (args.size() != 2 || args[0].starts_with("-") || args[1].starts_with("-")) {
    return report_usage_error("convert", invalid_argument("expected IN.gguf OUT_DIR; see --help"));
  }
  const auto start = std::chrono::steady_clock::now();
  if (Status s = engine::convert_gguf_to_hf(args[0], args[1]); !s.ok()) {
    std::fprintf(stderr, "rlrun convert: %s\n", s.message().c_str());
    return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ? kExitUsage : kExitFailed;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "rlrun convert: wrote %s in %.1f s\n", args[1].c_str(), seconds);
  return kExitOk;
}

}  // namespace rlrun::orchestrator
