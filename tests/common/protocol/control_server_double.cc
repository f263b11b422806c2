// control_server_double - a TEST DOUBLE, not part of rlrun: a ControlServer loop in its own
// process, for control_plane_test to attack with garbage and check that it stays up.
//
// Usage: control_server_double [MAX_FRAME_BYTES]
// Prints "ENDPOINT tcp://127.0.0.1:PORT" on stdout once bound, then serves until Shutdown:
//   Register -> RegisterAck{assigned id, "double", {"malformed": <malformed messages so far>}}
//   Shutdown -> Shutdown{"bye"}; exit 0 once the peer acknowledges it (its next message), 3 if it
//               does not within 5 s (queued messages die with the process: linger 0)
//   anything else -> echoed back unchanged.
// Exits by itself after 60 s, or when its parent is gone, so a crashed test leaves nothing behind.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/observe/log.h"
#include "common/protocol/control_plane.h"

using namespace rlrun;

int main(int argc, char** argv) {
  log::set_process_name("control-server-double");
  ControlServer::Options options;
  options.malformed_warn_interval = std::chrono::milliseconds(60000);
  if (argc > 1) options.socket.max_frame_bytes = std::atoll(argv[1]);
  auto server = ControlServer::bind(options);
  if (!server.ok()) {
    log::error(server.status().to_string());
    return 1;
  }
  std::printf("ENDPOINT %s\n", (*server)->endpoint().c_str());
  std::fflush(stdout);
  const pid_t parent = getppid();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint32_t next_id = 0;
  while (std::chrono::steady_clock::now() < give_up && getppid() == parent) {
    auto in = (*server)->poll(std::chrono::milliseconds(100));
    if (!in.ok()) {
      if (in.status().code() == StatusCode::kTimeout) continue;
      log::error(in.status().to_string());
      return 1;
    }
    const uint64_t cid = in->message.correlation_id;
    Status sent;
    if (in->message.get<Register>()) {
      RegisterAck ack{++next_id, "double", {{"malformed", std::to_string((*server)->malformed_count())}}};
      sent = (*server)->send(in->peer, ack, cid);
    } else if (in->message.get<Shutdown>()) {
      sent = (*server)->send(in->peer, Shutdown{"bye"}, cid);
      if (!sent.ok()) return 1;
      // control_plane.h: a process that must deliver a last message waits for its acknowledgement.
      const auto ack_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (std::chrono::steady_clock::now() < ack_by) {
        auto ack = (*server)->poll(std::chrono::milliseconds(100));
        if (ack.ok() && ack->peer == in->peer) return 0;
      }
      return 3;
    } else {
      sent = (*server)->send(in->peer, in->message);
    }
    if (!sent.ok()) log::warn(sent.to_string());
  }
  return 2;
}
