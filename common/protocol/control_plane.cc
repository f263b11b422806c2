// control_plane.cc - ROUTER server and DEALER client over the protocol.h messages.
#include "common/protocol/control_plane.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

#include "common/observe/log.h"
#include "common/protocol/curve_auth.h"

namespace rlrun {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Identities may be binary (libzmq's generated ones start with a 0 byte) or long (a hostile
// peer's up to 255 bytes): hex and cut them for logs.
std::string printable(const std::string& identity) {
  constexpr size_t kShown = 32;
  bool plain = !identity.empty();
  for (unsigned char c : identity) plain = plain && std::isprint(c);
  std::string out = plain ? identity.substr(0, kShown) : "0x";
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; !plain && i < std::min(identity.size(), kShown / 2); ++i) {
    const unsigned char c = identity[i];
    out += {kHex[c >> 4], kHex[c & 15]};
  }
  if (identity.size() > (plain ? kShown : kShown / 2)) out += "...";
  return out;
}


enum class Received { kNothing, kMessage, kOversized };

// Receives one whole multipart message without blocking (libzmq delivers multipart messages
// atomically, so after POLLIN all parts are there). With `identity`, the first part is the
// ROUTER's routing identity. At most kMaxFrames frames and kMaxMessageBytes bytes are kept; past
// that the rest is received and freed part by part, and the result is kOversized.
Received receive_bounded(zmq::socket_t& socket, std::string* identity, Frames* frames, std::string* why) {
  frames->clear();
  bool first = true, oversized = false;
  size_t bytes = 0, parts = 0;
  while (true) {
    zmq::message_t part;
    if (!socket.recv(part, zmq::recv_flags::dontwait)) {
      if (first) return Received::kNothing;
      *why = "message ended early";  // cannot happen with atomic delivery; be safe anyway
      return Received::kOversized;
    }
    const bool more = part.more();
    if (first && identity) {
      identity->assign(static_cast<const char*>(part.data()), part.size());
    } else {
      ++parts;
      bytes += part.size();
      if (!oversized && (parts > kMaxFrames || bytes > kMaxMessageBytes)) {
        oversized = true;
        frames->clear();
      }
      if (!oversized) frames->push_back(std::move(part));
    }
    first = false;
    if (!more) break;
  }
  if (oversized) {
    *why = str("malformed message: ", parts, " frames / ", bytes, " bytes exceeds the limits of ", kMaxFrames,
               " frames / ", kMaxMessageBytes, " bytes");
    return Received::kOversized;
  }
  return Received::kMessage;
}

// Waits until the socket is readable or the deadline passes; false on timeout. The wait left is
// rounded up to whole milliseconds (zmq_poll's unit): rounded down, the last fraction of a
// millisecond before every deadline would poll with timeout 0 over and over (the orchestrator's
// 20 ms tick spent 5% of a core so).
bool wait_readable(zmq::socket_t& socket, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::max(left, milliseconds(0)));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if (item.revents & ZMQ_POLLIN) return true;
    if (Clock::now() >= deadline) return false;
  }
}

// Counts a malformed message and logs it, at most once per interval.
void tally_malformed(MalformedTally& tally, milliseconds interval, const std::string& from, const Status& error) {
  ++tally.count;
  const auto now = Clock::now();
  if (tally.last_warning != Clock::time_point{} && now - tally.last_warning < interval) {
    ++tally.suppressed;
    return;
  }
  log::warn(str("control plane: dropped a malformed message from ", from, ": ", error.message(), " (",
                tally.count, " so far", tally.suppressed ? str(", ", tally.suppressed, " not logged") : "", ")"));
  tally.suppressed = 0;
  tally.last_warning = now;
}

Status zmq_status(const zmq::error_t& e, const std::string& what) {
  return io_error(str(what, ": ", e.what()));
}

}  // namespace

Status apply_socket_options(zmq::socket_t& socket, const SocketOptions& o) {
  socket.set(zmq::sockopt::linger, 0);  // close never blocks on undelivered messages
  socket.set(zmq::sockopt::sndhwm, o.send_hwm);
  socket.set(zmq::sockopt::rcvhwm, o.recv_hwm);
  socket.set(zmq::sockopt::maxmsgsize, o.max_frame_bytes);
  if (o.heartbeat_interval.count() > 0) {
    socket.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(o.heartbeat_interval.count()));
    socket.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(o.heartbeat_timeout.count()));
  }
  return Status();
}

// libzmq's "zero-copy receive" (on by default) makes each received frame a view into a shared
// 8 KiB read buffer at an arbitrary offset: arrays would mostly be misaligned (so copied) and a
// kept array would pin the whole buffer. Off, each frame gets its own malloc'd (aligned) block,
// which WireArray keeps without copying. ZMQ_ZERO_COPY_RECV (10) is a draft context option:
// where libzmq lacks it, decoding still works, copying misaligned arrays.
constexpr int kZmqZeroCopyRecv = 10;

zmq::context_t& control_context() {
  static zmq::context_t* context = [] {
    auto* c = new zmq::context_t(1);  // intentionally never destroyed
    if (zmq_ctx_set(c->handle(), kZmqZeroCopyRecv, 0) != 0)
      log::debug("libzmq has no ZMQ_ZERO_COPY_RECV: received arrays are copied when misaligned");
    return c;
  }();
  return *context;
}

// ---------------------------------------------------------------- ControlServer

ControlServer::ControlServer(Options options, ZapRegistrationPtr zap, zmq::socket_t socket, std::string endpoint,
                             int port)
    : options_(std::move(options)),
      zap_(std::move(zap)),
      socket_(std::move(socket)),
      endpoint_(std::move(endpoint)),
      port_(port) {}

ControlServer::~ControlServer() = default;

Result<std::unique_ptr<ControlServer>> ControlServer::bind(const Options& options) {
  zmq::context_t& context = options.socket.context ? *options.socket.context : control_context();
  try {
    zmq::socket_t socket(context, zmq::socket_type::router);
    RLRUN_RETURN_IF_ERROR(apply_socket_options(socket, options.socket));
    ZapRegistrationPtr zap;
    if (options.socket.security.mechanism == SecurityOptions::Mechanism::kCurve) {
      RLRUN_ASSIGN_OR_RETURN(zap, apply_curve_server(socket, context, options.socket.security));
    }
    socket.set(zmq::sockopt::router_mandatory, 1);  // sending to an unknown peer is an error
    socket.set(zmq::sockopt::router_handover, 1);   // a reconnecting worker takes over its identity
    try {
      socket.bind(options.bind_endpoint);
    } catch (const zmq::error_t& e) {
      if (e.num() == EADDRINUSE) {
        return unavailable(str("cannot bind the control plane to ", options.bind_endpoint,
                               ": address in use (pick another port, or port 0 for any free one)"));
      }
      return invalid_argument(str("cannot bind the control plane to `", options.bind_endpoint, "`: ", e.what(),
                                  " (expected tcp://HOST:PORT)"));
    }
    std::string endpoint = socket.get(zmq::sockopt::last_endpoint);
    const int port = std::atoi(endpoint.substr(endpoint.rfind(':') + 1).c_str());
    return std::unique_ptr<ControlServer>(new ControlServer(options, std::move(zap), std::move(socket), std::move(endpoint), port));
  } catch (const zmq::error_t& e) {
    return zmq_status(e, "creating the control plane socket");
  }
}

Result<Incoming> ControlServer::poll(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  try {
    while (wait_readable(socket_, deadline)) {
      Incoming in;
      Frames frames;
      std::string why;
      const Received got = receive_bounded(socket_, &in.peer, &frames, &why);
      if (got == Received::kNothing) continue;
      Result<WireHeader> header =
          got == Received::kMessage ? decode_header(frames) : Result<WireHeader>(protocol_error(why));
      Result<Message> message = header.ok() ? decode(std::move(frames)) : Result<Message>(header.status());
      if (message.ok()) {
        in.message = std::move(message).value();
        return in;
      }
      tally_malformed(tally_, options_.malformed_warn_interval, str("peer ", printable(in.peer)), message.status());
      if (options_.reply_to_malformed) {
        const uint16_t kind = header.ok() ? uint16_t(header->kind) : uint16_t(0);
        ErrorReply reply{StatusCode::kProtocol, kind, message.status().message()};
        (void)send(in.peer, reply, header.ok() ? header->correlation_id : 0);  // best effort
      }
      if (Clock::now() >= deadline) break;  // a flood of garbage must not hold the caller past its timeout
    }
  } catch (const zmq::error_t& e) {
    return zmq_status(e, str("receiving on the control plane ", endpoint_));
  }
  return timeout_error(str("no control message on ", endpoint_, " within ", timeout.count(), " ms"));
}

Status ControlServer::send_frames(const std::string& peer, Frames frames) {
  if (frames.empty()) return invalid_argument("ControlServer::send_frames: no frames");
  try {
    zmq::message_t id(peer.data(), peer.size());
    if (!socket_.send(id, zmq::send_flags::dontwait | zmq::send_flags::sndmore)) {
      return unavailable(str("control peer ", printable(peer), " is not reading: its queue of ",
                             options_.socket.send_hwm, " messages is full"));
    }
    for (size_t i = 0; i < frames.size(); ++i) {
      const auto more = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      // After the routing frame is accepted, libzmq accepts the rest of the message.
      if (!socket_.send(frames[i], zmq::send_flags::dontwait | more))
        return internal_error(str("control plane: libzmq refused frame ", i, " of a message to ", printable(peer)));
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return unavailable(str("control peer ", printable(peer), " is not connected"));
    return zmq_status(e, str("sending to control peer ", printable(peer)));
  }
  return Status();
}

// ---------------------------------------------------------------- ControlClient

ControlClient::ControlClient(Options options, zmq::socket_t socket)
    : options_(std::move(options)), socket_(std::move(socket)) {}

ControlClient::~ControlClient() = default;

Result<std::unique_ptr<ControlClient>> ControlClient::connect(const Options& options) {
  zmq::context_t& context = options.socket.context ? *options.socket.context : control_context();
  try {
    zmq::socket_t socket(context, zmq::socket_type::dealer);
    RLRUN_RETURN_IF_ERROR(apply_socket_options(socket, options.socket));
    if (options.socket.security.mechanism == SecurityOptions::Mechanism::kCurve)
      RLRUN_RETURN_IF_ERROR(apply_curve_client(socket, options.socket.security));
    if (!options.identity.empty()) socket.set(zmq::sockopt::routing_id, options.identity);
    socket.set(zmq::sockopt::reconnect_ivl, static_cast<int>(options.reconnect_interval.count()));
    socket.set(zmq::sockopt::reconnect_ivl_max, static_cast<int>(options.reconnect_interval_max.count()));
    try {
      socket.connect(options.endpoint);
    } catch (const zmq::error_t& e) {
      return invalid_argument(str("cannot connect to the control plane at `", options.endpoint, "`: ", e.what(),
                                  " (expected tcp://HOST:PORT)"));
    }
    return std::unique_ptr<ControlClient>(new ControlClient(options, std::move(socket)));
  } catch (const zmq::error_t& e) {
    return zmq_status(e, "creating the control client socket");
  }
}

Status ControlClient::send_frames(Frames frames) {
  std::lock_guard<std::mutex> lock(socket_mutex_);
  return send_frames_locked(frames);
}

ControlClient::TrySend ControlClient::try_send_frames(Frames frames) {
  std::unique_lock<std::mutex> lock(socket_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return TrySend::kBusy;
  return send_frames_locked(frames).ok() ? TrySend::kSent : TrySend::kFailed;
}

Status ControlClient::send_frames_locked(Frames& frames) {
  if (frames.empty()) return invalid_argument("ControlClient::send_frames: no frames");
  try {
    for (size_t i = 0; i < frames.size(); ++i) {
      const auto more = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (!socket_.send(frames[i], zmq::send_flags::dontwait | more)) {
        if (i == 0) {
          return unavailable(str("control plane ", options_.endpoint, ": send queue of ", options_.socket.send_hwm,
                                 " messages is full (server unreachable or not reading)"));
        }
        return internal_error(str("control plane: libzmq refused frame ", i, " of a message"));
      }
    }
  } catch (const zmq::error_t& e) {
    return zmq_status(e, str("sending to the control plane ", options_.endpoint));
  }
  return Status();
}

Result<Message> ControlClient::receive_from_socket(Clock::time_point deadline) {
  try {
    while (wait_readable(socket_, deadline)) {
      Frames frames;
      std::string why;
      const Received got = receive_bounded(socket_, nullptr, &frames, &why);
      if (got == Received::kNothing) continue;
      Result<Message> message = got == Received::kMessage ? decode(std::move(frames)) : Result<Message>(protocol_error(why));
      if (message.ok()) return message;
      tally_malformed(tally_, milliseconds(5000), str("server ", options_.endpoint), message.status());
      if (Clock::now() >= deadline) break;
    }
  } catch (const zmq::error_t& e) {
    return zmq_status(e, str("receiving from the control plane ", options_.endpoint));
  }
  return timeout_error(str("no message from the control plane ", options_.endpoint, " in time"));
}

Result<Message> ControlClient::receive(milliseconds timeout) {
  std::lock_guard<std::mutex> lock(socket_mutex_);
  if (!set_aside_.empty()) {
    Message m = std::move(set_aside_.front());
    set_aside_.pop_front();
    return m;
  }
  return receive_from_socket(Clock::now() + timeout);
}

Result<Message> ControlClient::await_reply(uint64_t correlation_id, MessageKind request_kind, milliseconds timeout) {
  std::lock_guard<std::mutex> lock(socket_mutex_);
  const auto deadline = Clock::now() + timeout;
  while (true) {
    Result<Message> m = receive_from_socket(deadline);
    if (!m.ok()) {
      if (m.status().code() != StatusCode::kTimeout) return m.status();
      return timeout_error(str("no reply to ", message_kind_name(request_kind), " from the control plane ",
                               options_.endpoint, " within ", timeout.count(), " ms"));
    }
    if (m->correlation_id != correlation_id) {
      set_aside_.push_back(std::move(m).value());
      continue;
    }
    if (const ErrorReply* error = m->get<ErrorReply>()) {
      const StatusCode code = error->code == StatusCode::kOk ? StatusCode::kInternal : error->code;
      return Status(code, str("the control plane answered ", message_kind_name(request_kind), " with an error: ",
                              error->message));
    }
    return m;
  }
}

Result<RegisteredClient> connect_and_register(const ControlClient::Options& options, Register reg,
                                              milliseconds timeout) {
  RegisteredClient out;
  RLRUN_ASSIGN_OR_RETURN(out.client, ControlClient::connect(options));
  if (reg.host.empty()) {
    char name[256] = {};
    reg.host = gethostname(name, sizeof(name) - 1) == 0 ? name : "localhost";
  }
  reg.pid = static_cast<uint32_t>(getpid());
  Result<Message> reply = out.client->request(reg, timeout);
  if (!reply.ok()) {
    if (reply.status().code() != StatusCode::kTimeout) return reply.status().with_context(options.identity);
    return unavailable(str(options.identity, ": no RegisterAck from ", options.endpoint, " within ", timeout.count(),
                           " ms; is the orchestrator running there, and does this process hold the run's keys "
                           "(--control-keys)?"));
  }
  const RegisterAck* ack = reply->get<RegisterAck>();
  if (ack == nullptr)
    return protocol_error(str(options.identity, ": the orchestrator answered Register with ",
                              message_kind_name(reply->kind())));
  out.assigned_id = ack->assigned_id;
  return out;
}

}  // namespace rlrun
