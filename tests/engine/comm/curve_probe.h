// curve_probe.h - a stranger on a CURVE transport's port (engine/comm/curve_communicator.cc):
// what does it get through?
//
// probe_curve_transport() connects a DEALER with the given security under a member's routing id
// (on purpose: a peer admitted as "rank-1" would take that member's place and be sent its
// weights), says that member's hello, forges an ack and a chunk of data, and counts every message
// rank 0 sends it while it listens for `wait`. `settled`, when given, is set once rank 0 has
// settled its first connection: admitted it, or refused it (a failed handshake, a closed
// connection), so that a test can let the real member join only after every stranger tried.
#pragma once

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "common/protocol/control_plane.h"
#include "common/protocol/curve_auth.h"
#include "engine/comm/curve_wire.h"
#include "tests/common/socket_events.h"

namespace rlrun::testing {

inline int probe_curve_transport(const std::string& endpoint, const SecurityOptions& security, int claimed_rank,
                                 std::chrono::milliseconds wait, std::promise<void>* settled = nullptr) {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  SocketEvents events(context, socket,
                      ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                          ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                          ZMQ_EVENT_DISCONNECTED);
  if (security.mechanism == SecurityOptions::Mechanism::kCurve) {
    const Status s = apply_curve_client(socket, security);
    if (!s.ok()) ADD_FAILURE() << s.message();
  }
  socket.set(zmq::sockopt::routing_id, engine::curve_member_id(claimed_rank));
  socket.connect(endpoint);
  using engine::CurveKind;
  for (const CurveKind kind : {CurveKind::kHello, CurveKind::kAck, CurveKind::kData}) {
    const std::vector<uint8_t> head =
        engine::encode_curve_header({kind, kind == CurveKind::kHello ? uint64_t(claimed_rank) : 1, 0});
    const std::vector<uint8_t> forged(64, 0x5a);
    const auto more = kind == CurveKind::kData ? zmq::send_flags::sndmore : zmq::send_flags::none;
    (void)socket.send(zmq::buffer(head), zmq::send_flags::dontwait | more);
    if (kind == CurveKind::kData) (void)socket.send(zmq::buffer(forged), zmq::send_flags::dontwait);
  }
  int received = 0;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    if (settled != nullptr && events.wait(std::chrono::milliseconds(0)) != 0) {
      settled->set_value();
      settled = nullptr;
    }
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(20));
    zmq::message_t part;
    while ((item.revents & ZMQ_POLLIN) && socket.recv(part, zmq::recv_flags::dontwait)) ++received;
  }
  return received;
}

}  // namespace rlrun::testing
