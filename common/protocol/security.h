// security.h - who may talk on a run's sockets: the options a CURVE socket needs.
//
// Kept apart from control_plane.h (and free of ZeroMQ headers) because the collective groups of
// engine/comm/ carry them too: the weight transport is secured with the same run keys.
#pragma once

#include <string>

namespace rlrun {

// Who may talk on the control plane. kNone: anyone who can reach the port. kCurve: encrypted
// and authenticated with the run's keys (Z85 text, 40 characters; see curve_keys.h, whose
// server_security()/client_security() fill this): the server uses server_public/server_secret
// and admits only a client whose public key is client_public (checked by a ZAP handler, see
// curve_auth.h); a client uses server_public and its client_public/client_secret pair.
// Fields a side does not use stay empty (a client never needs the server secret).
//
// private_dir: a folder that only this user may open (mode 0700: the folder of the run's key
// file, <run_dir>/keys). A Unix socket there admits exactly who could read the keys, as the
// kernel checks the folder's permissions on every connect, so processes of one host may meet
// there unencrypted (the weight transport does: curve_communicator.cc). Empty: always CURVE.
struct SecurityOptions {
  enum class Mechanism { kNone, kCurve };
  Mechanism mechanism = Mechanism::kNone;
  std::string server_public, server_secret;
  std::string client_public, client_secret;
  std::string private_dir;
};

}  // namespace rlrun
