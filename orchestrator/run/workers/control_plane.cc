// run/workers/control_plane.cc - per-run CURVE keys in the run folder, the server that admits only them.
#include "orchestrator/run/workers/control_plane.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/observe/log.h"
#include "common/protocol/curve_keys.h"

namespace rlrun::orchestrator {

namespace {

// <run_dir>/keys with mode 0700, also when it already existed (a reused run folder).
Result<std::string> make_keys_dir(const std::string& run_dir) {
  const std::string dir = run_dir + "/keys";
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return io_error(str("cannot create the key folder ", dir, ": ", std::strerror(errno)));
  if (::chmod(dir.c_str(), 0700) != 0)
    return io_error(str("cannot make the key folder ", dir, " private (chmod 700): ", std::strerror(errno)));
  return dir;
}

}  // namespace

Result<RunControlPlane> bind_run_control_plane(const Config& config, const std::string& run_dir,
                                               const std::string& bind_endpoint) {
  RunControlPlane plane;
  ControlServer::Options options;
  options.bind_endpoint = bind_endpoint;
  if (config.control_plane_security == ControlPlaneSecurity::kCurve) {
    RLRUN_ASSIGN_OR_RETURN(std::string dir, make_keys_dir(run_dir));
    RLRUN_ASSIGN_OR_RETURN(plane.keys_path, write_run_keys(dir));
    RLRUN_ASSIGN_OR_RETURN(RunKeys keys, read_run_keys(plane.keys_path));
    options.socket.security = server_security(keys);
  }
  RLRUN_ASSIGN_OR_RETURN(plane.server, ControlServer::bind(options));
  log::info(str("control plane on ", plane.server->endpoint(), " (control_plane_security: ",
                enum_name(config.control_plane_security), ")"));
  return plane;
}

std::vector<std::string> control_key_flags(const RunControlPlane& plane) {
  if (plane.keys_path.empty()) return {};
  return {kControlKeysFlag, plane.keys_path};
}

Result<SecurityOptions> worker_control_security(const std::string& keys_path) {
  if (keys_path.empty()) return SecurityOptions{};
  Result<RunKeys> keys = read_run_keys(keys_path);
  if (!keys.ok()) {
    return Status(keys.status().code(), str(kControlKeysFlag, ": ", keys.status().message(),
                                            " (the orchestrator writes it at the start of the run, mode 0600; "
                                            "this process must run as the same user and see the run folder)"));
  }
  SecurityOptions security = client_security(*keys);
  security.private_dir = std::filesystem::path(keys_path).parent_path().string();  // 0700: run_control_plane()
  return security;
}

}  // namespace rlrun::orchestrator
