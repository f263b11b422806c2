// curve_keys.h - the per-run CURVE key pairs of the control plane and their key file.
//
// A run has two key pairs (Curve25519, as Z85 text of 40 characters): the orchestrator's server
// pair and one pair shared by all of the run's workers. The orchestrator writes them to a key file
// (mode 0600) in the run directory and passes its path to the workers; a control server accepts
// only the run's client public key (see curve_auth.h), so a process that cannot read the key file
// cannot talk to the control plane.
//
// Secrets never reach a log line or a Status message: name a key by key_fingerprint() of its
// public half.
#pragma once

#include <string>
#include <string_view>

#include "common/protocol/control_plane.h"
#include "common/status.h"

namespace rlrun {

inline constexpr char kRunKeysFileName[] = "control_keys";
inline constexpr size_t kZ85KeyChars = 40;  // a 32-byte key in Z85

struct RunKeys {
  std::string server_public, server_secret;  // Z85
  std::string client_public, client_secret;  // Z85
};

// unavailable when this libzmq was built without CURVE (zmq_has("curve") is false).
Status check_curve_available();

// Fresh random key pairs (zmq_curve_keypair).
Result<RunKeys> generate_run_keys();

// Generates a run's keys and writes them atomically to `dir`/control_keys with mode 0600;
// returns the file's path. An existing file is replaced (a new run, new keys).
Result<std::string> write_run_keys(const std::string& dir);

// Reads and validates a key file written by write_run_keys. Refuses a file readable or writable
// by group or others (the error names the file and the chmod to run), a missing key, a key that
// is not 40 characters of Z85, and a public key that does not belong to its secret key.
Result<RunKeys> read_run_keys(const std::string& path);

// The first 8 characters of a Z85 public key: enough to tell keys apart in a log, and public.
std::string key_fingerprint(std::string_view z85_public);

// ok when `public_z85` and `secret_z85` are valid Z85 keys and form a pair; `what` names them in
// the error ("the client key pair"). The message never contains the secret.
Status check_key_pair(std::string_view public_z85, std::string_view secret_z85, std::string_view what);

// The SecurityOptions each side needs: the server gets its pair and the client public key it
// accepts; a client gets the server public key and its own pair (never the server secret).
SecurityOptions server_security(const RunKeys& keys);
SecurityOptions client_security(const RunKeys& keys);

// Sockets between two of the run's workers (the weight transport, engine/comm/): every worker
// holds the same client pair (client_security()), so the serving worker uses that pair as its
// server pair and admits it, and the others connect to its public half. A peer without the key
// file can neither serve nor connect. `worker` is a worker's client_security(); a worker never
// holds the orchestrator's secret.
SecurityOptions worker_server_security(const SecurityOptions& worker);
SecurityOptions worker_client_security(const SecurityOptions& worker);

}  // namespace rlrun
