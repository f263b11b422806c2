// run/workers/control_plane.h - the run's control server, closed to everyone but the run's workers.
//
// With control_plane_security: curve (the default) a run generates fresh CURVE key pairs
// (curve_keys.h) into <run_dir>/keys/control_keys (folder 0700, file 0600, written atomically,
// never logged), binds its ControlServer as a CURVE server that admits only the run's client key
// (curve_auth.h), and starts every worker with `--control-keys <that file>`. A process that cannot
// read the file cannot complete the handshake: it cannot register, submit results, use the
// rendezvous store or receive anything (weights included). With `none` the socket admits anyone
// who reaches the port, and workers are started without --control-keys.
// The workers' SecurityOptions also name the keys' folder as their private_dir (security.h):
// weight syncs between processes of one host go through a Unix socket there, unencrypted.
//
// `rlrun CONFIG` and the tests that check the closed control plane both go through
// bind_run_control_plane(), so what is tested is what runs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/protocol/control_plane.h"
#include "common/status.h"

namespace rlrun::orchestrator {

inline constexpr char kControlKeysFlag[] = "--control-keys";

struct RunControlPlane {
  std::unique_ptr<ControlServer> server;
  std::string keys_path;  // the key file to hand to workers; empty with control_plane_security: none
};

// Binds the run's control server on `bind_endpoint` (tcp://HOST:PORT), secured as
// config.control_plane_security says; with curve, writes the run's keys under `run_dir`/keys/.
Result<RunControlPlane> bind_run_control_plane(const Config& config, const std::string& run_dir,
                                               const std::string& bind_endpoint = "tcp://127.0.0.1:0");

// The flags that give a worker the run's keys: {"--control-keys", keys_path}, or none.
std::vector<std::string> control_key_flags(const RunControlPlane& plane);

// A worker's side: the SecurityOptions of its control clients. An empty `keys_path` (no
// --control-keys: a worker started by hand, or a run with `none`) means no security; otherwise
// the key file is read and checked, and an error names the file and what to do.
Result<SecurityOptions> worker_control_security(const std::string& keys_path);

}  // namespace rlrun::orchestrator
