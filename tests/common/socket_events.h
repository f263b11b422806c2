// socket_events.h - a test waits for a zmq socket's connection event instead of sleeping.
//
//   zmq::socket_t s(context, zmq::socket_type::dealer);
//   testing::SocketEvents events(context, s, ZMQ_EVENT_DISCONNECTED);  // before connect: none missed
//   s.connect(endpoint);
//   ...
//   ASSERT_NE(events.wait(5s), 0) << "the server never dropped the connection";
//
// Watches `socket` through zmq_socket_monitor (an inproc PAIR in the socket's context). Lives no
// longer than the socket; one thread uses it.
#pragma once

#include <zmq.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace rlrun::testing {

class SocketEvents {
 public:
  // `events`: a mask of ZMQ_EVENT_* to watch.
  SocketEvents(zmq::context_t& context, zmq::socket_t& socket, int events) {
    static std::atomic<int> next{0};
    const std::string endpoint = "inproc://test-socket-events-" + std::to_string(next++);
    if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), events) != 0)
      ADD_FAILURE() << "zmq_socket_monitor: " << zmq_strerror(zmq_errno());
    monitor_ = zmq::socket_t(context, zmq::socket_type::pair);
    monitor_.set(zmq::sockopt::linger, 0);
    monitor_.connect(endpoint);
  }

  // The first watched event that comes within `timeout` (a ZMQ_EVENT_* value), or 0.
  int wait(std::chrono::milliseconds timeout) {
    zmq::pollitem_t item{monitor_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) <= 0) return 0;
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(monitor_, std::back_inserter(parts), zmq::recv_flags::dontwait) || parts.empty() ||
        parts[0].size() < sizeof(uint16_t))
      return 0;
    uint16_t event = 0;
    std::memcpy(&event, parts[0].data(), sizeof event);  // libzmq's v1 event frame: u16 event, u32 value
    return event;
  }

 private:
  zmq::socket_t monitor_;
};

}  // namespace rlrun::testing
