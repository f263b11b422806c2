// control_plane.h - the ZeroMQ control plane: the orchestrator's ROUTER and the workers' DEALERs.
//
// ControlServer binds a ROUTER; every ControlClient connects a DEALER with an identity of its
// own choosing (e.g. "rollout-3"), which is how the server addresses replies. Messages are the
// protocol.h kinds; a reply carries the request's correlation id.
//
// Untrusted peers: anything that reaches the server's socket is decoded with the bounded
// decoder. Non-ZMTP bytes (a port scanner, a stray HTTP client) are dropped by libzmq's handshake
// before we see them; a ZMTP peer announcing a frame over max_frame_bytes is disconnected by
// libzmq (ZMQ_MAXMSGSIZE) before the frame is allocated; a message with too many frames or bytes
// is drained and dropped; a malformed one is counted, logged at a rate-limited warning, and
// answered with an ErrorReply. None of it disturbs other peers, and a flood of garbage never
// holds poll() past its timeout. (libzmq reads a peer that skips the ZMTP/3 greeting as legacy
// ZMTP/1.0, so raw noise may surface as a few malformed messages: counted and dropped like any.)
// Known gap: libzmq buffers a multipart message whole before delivering it, so without CURVE
// (SecurityOptions) a hostile peer can still make libzmq buffer up to recv_hwm messages of
// (frames x max_frame_bytes) each. With CURVE, only holders of the run's client key get past the
// handshake.
//
// Threads: ZeroMQ sockets are not thread-safe. A ControlServer must be used by one thread at a
// time (it may be created on one thread and handed to another with the usual happens-before, e.g.
// through a std::thread constructor or a mutex). A ControlClient may be shared: each call holds
// its socket for the call's length (a receive() for its wait), so a worker's LivenessBeacon
// (liveness_beacon.h) sends through it while the worker's own thread computes. Distinct instances
// may be used concurrently; they share one process-wide zmq::context_t by default.
//
// Reconnects (client): connect() returns at once; libzmq connects in the background and retries
// every reconnect_interval (backing off to reconnect_interval_max) for as long as the client
// lives. Messages sent while no connection exists are queued (up to send_hwm) and delivered once
// it does; messages queued on a connection that then breaks may be lost. So a request with no
// reply times out, and the caller retries: requests must be idempotent or de-duplicated by the
// server (by correlation id). A client reconnecting with the same identity takes over its routing
// entry on the server (ZMQ_ROUTER_HANDOVER); without an identity it gets a fresh random one per
// connection and cannot be addressed after a reconnect.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include <zmq.hpp>

#include "common/protocol/protocol.h"
#include "common/protocol/security.h"
#include "common/status.h"

namespace rlrun {

// Keeps a CURVE server's ZAP domain registered (curve_auth.h); opaque here.
class ZapRegistration;
struct ZapRegistrationDeleter {
  void operator()(ZapRegistration* r) const;
};
using ZapRegistrationPtr = std::unique_ptr<ZapRegistration, ZapRegistrationDeleter>;

// Options every control socket gets. Defaults suit the orchestrator's control traffic.
struct SocketOptions {
  int send_hwm = 10000;                       // messages queued per peer before send() fails
  int recv_hwm = 10000;                       // messages queued per peer before libzmq stops reading
  int64_t max_frame_bytes = kMaxFrameBytes;   // ZMQ_MAXMSGSIZE: bigger frames drop the connection
  std::chrono::milliseconds heartbeat_interval{1000};  // ZMTP pings (0 = off): dead TCP peers
  std::chrono::milliseconds heartbeat_timeout{5000};   // are disconnected after this silence
  SecurityOptions security;
  zmq::context_t* context = nullptr;          // nullptr: the process-wide control_context()
                                              // (another context: see control_context() on alignment)
};

// Applies `options` to a fresh socket (before bind/connect): linger 0, high-water marks, the frame
// size limit and ZMTP heartbeats. Security is applied separately (curve_auth.h).
Status apply_socket_options(zmq::socket_t& socket, const SocketOptions& options);

// One zmq context for the process (1 I/O thread), with libzmq's shared-buffer receive turned off
// so that received array frames are separately allocated and aligned (decoded WireArrays then
// view them without a copy and pin nothing else). Never destroyed: destroying a context blocks
// until every socket is closed, which must not hang process exit. Consequence: messages still
// queued when the process exits are lost (sockets close with linger 0); a process that must
// deliver a last message waits for its acknowledgement before exiting.
zmq::context_t& control_context();

// Malformed messages seen by one socket, for the rate-limited warning.
struct MalformedTally {
  uint64_t count = 0;
  uint64_t suppressed = 0;  // since the last warning
  std::chrono::steady_clock::time_point last_warning{};
};

struct Incoming {
  std::string peer;  // routing identity of the sender: pass it to send()
  Message message;
};

class ControlServer {
 public:
  struct Options {
    // tcp://HOST:PORT; PORT 0 or * picks a free port, HOST * means every interface.
    std::string bind_endpoint = "tcp://127.0.0.1:0";
    SocketOptions socket;
    std::chrono::milliseconds malformed_warn_interval{5000};  // at most one warning per interval
    bool reply_to_malformed = true;  // answer a malformed message with an ErrorReply
  };

  // Errors: invalid_argument for a bad endpoint, unavailable when the address is in use.
  static Result<std::unique_ptr<ControlServer>> bind(const Options& options);
  ~ControlServer();

  // The endpoint actually bound, e.g. "tcp://127.0.0.1:40123" (connectable unless HOST was *).
  const std::string& endpoint() const { return endpoint_; }
  int port() const { return port_; }

  // The next well-formed message, waiting up to `timeout`: timeout_error when none came.
  // Malformed messages are counted and skipped while waiting.
  Result<Incoming> poll(std::chrono::milliseconds timeout);

  // Never blocks. unavailable when the peer is not connected (ZMQ_ROUTER_MANDATORY) or its
  // queue is full (send_hwm).
  template <WireMessage T>
  Status send(const std::string& peer, const T& message, uint64_t correlation_id = 0) {
    return send_frames(peer, encode(message, correlation_id));
  }
  Status send(const std::string& peer, const Message& message) { return send_frames(peer, encode(message)); }
  Status send_frames(const std::string& peer, Frames frames);

  uint64_t malformed_count() const { return tally_.count; }

 private:
  ControlServer(Options options, ZapRegistrationPtr zap, zmq::socket_t socket, std::string endpoint, int port);

  Options options_;
  ZapRegistrationPtr zap_;  // CURVE only; declared before socket_ so it outlives the socket
  zmq::socket_t socket_;
  std::string endpoint_;
  int port_ = 0;
  MalformedTally tally_;
};

class ControlClient {
 public:
  struct Options {
    std::string endpoint;   // the server's endpoint, tcp://HOST:PORT
    std::string identity;   // routing identity, unique per server ("trainer-0"); empty: random
    SocketOptions socket;
    std::chrono::milliseconds reconnect_interval{100};
    std::chrono::milliseconds reconnect_interval_max{2000};
  };

  static Result<std::unique_ptr<ControlClient>> connect(const Options& options);
  ~ControlClient();

  const std::string& identity() const { return options_.identity; }

  // Never blocks: unavailable when send_hwm messages are already queued.
  template <WireMessage T> Status send(const T& message, uint64_t correlation_id = 0) {
    return send_frames(encode(message, correlation_id));
  }
  Status send(const Message& message) { return send_frames(encode(message)); }
  Status send_frames(Frames frames);
  // As send_frames, but only when no other thread holds the socket (a receive() waiting there,
  // another send): busy, nothing sent, otherwise. Never waits.
  enum class TrySend { kSent, kBusy, kFailed };
  TrySend try_send_frames(Frames frames);

  // The next message from the server (ones set aside by request() first), waiting up to
  // `timeout`; timeout_error when none came. Malformed messages are counted and skipped.
  Result<Message> receive(std::chrono::milliseconds timeout);

  // Sends `message` with a fresh correlation id (top bit set, so it cannot collide with ids a
  // caller picks below 2^63) and waits for the reply carrying it. Other messages arriving
  // meanwhile are kept, in order, for receive() (so is a late reply to a timed-out request):
  // a caller of request() that can receive pushed messages must also drain receive().
  // An ErrorReply comes back as its Status.
  template <WireMessage T> Result<Message> request(const T& message, std::chrono::milliseconds timeout) {
    const uint64_t id = next_request_id();
    RLRUN_RETURN_IF_ERROR(send(message, id));
    return await_reply(id, T::kKind, timeout);
  }

  uint64_t malformed_count() {
    std::lock_guard<std::mutex> lock(socket_mutex_);
    return tally_.count;
  }

 private:
  ControlClient(Options options, zmq::socket_t socket);
  uint64_t next_request_id() {
    std::lock_guard<std::mutex> lock(socket_mutex_);
    return (uint64_t{1} << 63) | ++request_counter_;
  }
  Result<Message> await_reply(uint64_t correlation_id, MessageKind request_kind, std::chrono::milliseconds timeout);
  // One message from the socket before `deadline`, skipping malformed ones.
  Result<Message> receive_from_socket(std::chrono::steady_clock::time_point deadline);
  Status send_frames_locked(Frames& frames);

  Options options_;
  std::mutex socket_mutex_;  // guards socket_, set_aside_, request_counter_ and tally_
  zmq::socket_t socket_;
  std::deque<Message> set_aside_;  // received while request() waited for another reply
  uint64_t request_counter_ = 0;
  MalformedTally tally_;
};

// A worker's first exchange with the orchestrator (trainer ranks and rollout workers alike):
// connects as options.identity, sends `reg` (host: this machine's name when empty; pid: this
// process) and waits up to `timeout` for the RegisterAck. Errors name the endpoint; a timeout
// also names the usual causes (no orchestrator there, or this process lacks the run's keys).
struct RegisteredClient {
  std::unique_ptr<ControlClient> client;
  uint32_t assigned_id = 0;
};
Result<RegisteredClient> connect_and_register(const ControlClient::Options& options, Register reg,
                                              std::chrono::milliseconds timeout);

}  // namespace rlrun
