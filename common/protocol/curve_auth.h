// curve_auth.h - CURVE on control sockets, and the ZAP handler that admits only the run's client.
//
// CURVE alone admits any peer that knows the server's public key. To admit only the run's client
// key, a CURVE server socket gets a ZAP domain of its own, and a ZAP handler (RFC 27) bound at
// inproc://zeromq.zap.01 in the socket's context answers libzmq's authentication requests:
// 200 for the one client public key registered for that domain, 400 for any other key. One
// handler thread serves a context; it starts with the first registration and stops (joined) when
// the last registration is destroyed. NULL-mechanism sockets in the same context are admitted as
// before (they never asked for authentication).
#pragma once

#include <memory>
#include <string_view>

#include <zmq.hpp>

#include "common/protocol/control_plane.h"
#include "common/status.h"

namespace rlrun {

// ZapRegistrationPtr (control_plane.h) keeps a server socket's ZAP domain registered with its
// context's handler; destroy it after the socket is closed.

// Makes `socket` (before bind) a CURVE server with `security.server_*` keys that admits only
// `security.client_public`; `what` names the socket in logs and errors. Errors: unavailable
// without CURVE in libzmq, invalid_argument for a bad key (never quoting a secret), unavailable
// when another ZAP handler owns the context.
Result<ZapRegistrationPtr> apply_curve_server(zmq::socket_t& socket, zmq::context_t& context,
                                              const SecurityOptions& security,
                                              std::string_view what = "control plane");

// Makes `socket` (before connect) a CURVE client of the server `security.server_public` with the
// `security.client_*` pair.
Status apply_curve_client(zmq::socket_t& socket, const SecurityOptions& security);

}  // namespace rlrun
