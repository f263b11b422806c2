// curve_communicator.cc - the CURVE transport: a star of ZeroMQ sockets encrypted and
// authenticated with the run's keys, for groups whose collective is a broadcast from rank 0 (the
// weight-sync group). Frames: curve_wire.h.
//
// Rank 0 binds a ROUTER on options.interface_host as a CURVE server with the run's worker key
// pair that admits only the run's worker key (worker_server_security(), a ZAP handler in this
// communicator's own zmq context); every other rank connects a DEALER as a CURVE client of that
// key. A peer without the run's key file fails the handshake: libzmq hands none of its bytes to
// us and sends it none of ours. A fake rank 0 fails the members' handshake the same way.
//
// Members on rank 0's host skip the encryption: with a private_dir (security.h: the keys' own
// folder, mode 0700) rank 0's ROUTER also binds a Unix socket there, without CURVE (libzmq takes a
// socket's options at each bind, so the TCP endpoint stays CURVE-only). The kernel lets only this
// user open that folder, which is who could read the keys, so the socket admits the same peers the
// keys do. A member uses it when it runs on the same host (hostname and boot id) and the socket
// lies in a folder private to it; any other member, or a folder that is not private, uses TCP +
// CURVE. A sync of SmolLM2-135M's 540 MB of f32 weights takes 0.19 s through the socket where
// CURVE takes 0.66 s, and the cores saved from encrypting are the trainer's and the rollout's
// (bench/weight_sync_bench.cc: `local` against `curve`).
//
// Formation, bounded by options.timeout: rank 0 sets "<name>/curve/local" (its host and Unix
// socket, or empty) and then "<name>/curve/endpoint" in the store; a member gets them, connects,
// sends kHello and sets "<name>/curve/joined/<rank>"; rank 0 gets every joined key (so
// RendezvousService::abandon fails it at once when a member died), waits for every hello, and
// answers each with kWelcome, which the member waits for.
//
// A broadcast, each wait bounded by the collective timeout: rank 0 copies each chunk once into a
// message that every member's queue shares and sends it to each member in turn, then waits for
// every kAck, probing the silent members every kProbeInterval (a member whose process died has
// left the ROUTER, so the probe fails at once). A member receives the chunks in order straight
// into its buffer, then acks. A failure at rank 0 sends kAbort to the members and breaks the
// communicator (later calls fail at once): as with Gloo, a failed collective leaves the group
// out of step, and the caller re-forms it. A member whose connection to rank 0 closes fails at
// once (a socket monitor reports it).
//
// Memory beyond the caller's buffer: rank 0 holds at most kWindowChunks chunks per member queue
// (shared between members), a member kWindowChunks chunks; libzmq's CURVE adds about two chunk
// copies per connection being encrypted or decrypted.
// Threads: one caller at a time (communicator.h); libzmq's I/O threads encrypt and decrypt.
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <string_view>

#include "common/file_io.h"
#include "common/observe/log.h"
#include "common/protocol/control_plane.h"
#include "common/protocol/curve_auth.h"
#include "common/protocol/curve_keys.h"
#include "engine/comm/communicator.h"
#include "engine/comm/curve_wire.h"

namespace rlrun::engine {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kWindowChunks = 16;            // send_hwm at rank 0, recv_hwm at a member (messages)
constexpr int64_t kFrameSlack = 4096;        // CURVE's per-frame overhead and its handshake commands
constexpr milliseconds kProbeInterval{100};  // rank 0 checks silent members this often
constexpr milliseconds kAbortLinger{500};    // how long closing rank 0 tries to deliver kAbort
constexpr size_t kMaxAbortText = 1000;
constexpr int kMaxIoThreads = 4;             // rank 0 encrypts for up to this many members at once
constexpr char kMonitorEndpoint[] = "inproc://curve-member-monitor";  // unique: one context per communicator
constexpr std::string_view kIpc = "ipc://";  // a Unix socket's endpoint: this, then its path

// Rounded up: a wait rounded down to 0 ms would poll without waiting until the deadline passed.
milliseconds left_until(Clock::time_point deadline) {
  return std::max(milliseconds(0), std::chrono::ceil<milliseconds>(deadline - Clock::now()));
}

// Polls `items` until one is ready or the deadline passes (EINTR is not an answer).
void poll_until(zmq::pollitem_t* items, size_t n, Clock::time_point deadline) {
  while (true) {
    try {
      zmq::poll(items, n, left_until(deadline));
      return;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

// This host, as two processes that can reach each other's Unix sockets see it: its name and the
// kernel's boot id (a host name alone may repeat across containers or misconfigured nodes).
std::string host_identity() {
  char name[256] = {};
  (void)::gethostname(name, sizeof(name) - 1);
  Result<std::string> boot = read_file("/proc/sys/kernel/random/boot_id", "boot id");
  std::string id = boot.ok() ? *boot : std::string("?");
  std::erase_if(id, [](char c) { return c == '\n'; });
  return str(name, "/", id);
}

// ok when `dir` is a folder of this user that nobody else may open (security.h, private_dir).
Status check_private_dir(const std::string& dir) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) return unavailable(str("the private folder ", dir, ": ", std::strerror(errno)));
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return invalid_argument(str(dir, " is not a folder of this user with mode 0700"));
  }
  return Status();
}

class CurveCommunicator : public Communicator {
 public:
  explicit CurveCommunicator(const GroupOptions& options)
      : options_(options),
        timeout_(options.collective_timeout.count() > 0 ? options.collective_timeout : options.timeout),
        context_(std::make_unique<zmq::context_t>(options.rank == 0 ? std::clamp(options.size - 1, 1, kMaxIoThreads) : 1)) {
    for (int r = 0; r < options.size; ++r) member_ids_.push_back(curve_member_id(r));
  }

  Status form(RendezvousStore& store);

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  Status broadcast(void* data, size_t count, CommDType dtype, int root) override;
  Status barrier() override { return broadcast(nullptr, 0, CommDType::kU8, 0); }
  Status all_reduce_sum(void*, size_t, CommDType) override { return not_here("all_reduce_sum"); }
  Status reduce_scatter_sum(const void*, void*, size_t, CommDType) override { return not_here("reduce_scatter_sum"); }
  Status all_gather(const void*, void*, size_t, CommDType) override { return not_here("all_gather"); }

 private:
  struct Inbound {  // a member's message at rank 0
    int rank = -1;  // -1: not a member's routing id
    Result<CurveHeader> header = protocol_error("no message");
  };

  // rank 0
  Status bind_and_publish(RendezvousStore& store);
  std::string bind_private();
  Status await_members(RendezvousStore& store, Clock::time_point deadline);
  Status send_broadcast(const uint8_t* data, size_t bytes, uint64_t seq);
  Status await_acks(uint64_t seq);
  Status send_to(int member, const CurveHeader& header, zmq::message_t* payload, bool wait);
  Inbound receive_inbound();
  void abort_members(const std::string& reason);
  // members
  Status connect(RendezvousStore& store, Clock::time_point deadline);
  Result<bool> use_private(RendezvousStore& store, Clock::time_point deadline);
  Status await_welcome(Clock::time_point deadline);
  Status receive_broadcast(uint8_t* data, size_t bytes, uint64_t seq);
  Status wait_for_rank0(Clock::time_point deadline, const std::string& waiting_for);
  Status read_monitor_event();
  Status send_to_rank0(const CurveHeader& header);
  void drain_frames();

  std::string who() const { return str("group `", options_.name, "` rank ", options_.rank); }
  Status not_here(const char* op) const {
    return invalid_argument(str(who(), ": ", op, " is not implemented by the CURVE transport, which carries broadcasts ",
                                "from rank 0 (the weight-sync group)"));
  }

  GroupOptions options_;
  milliseconds timeout_;                     // each wait of a collective
  std::unique_ptr<zmq::context_t> context_;  // destroyed last, after every socket in it
  ZapRegistrationPtr zap_;                   // rank 0: its ZAP domain, released after socket_ closes
  zmq::socket_t socket_;                     // rank 0: ROUTER; member: DEALER
  zmq::socket_t monitor_;                    // member: socket_'s connection events
  std::string endpoint_;                     // rank 0's (a member: the one it connected to)
  std::string private_path_;                 // rank 0's Unix socket until formed; empty when none
  std::vector<std::string> member_ids_;      // routing id by rank
  uint64_t seq_ = 0;                         // broadcasts so far
  Status broken_;                            // the failure that broke the group; ok while usable
};

Status CurveCommunicator::form(RendezvousStore& store) {
  const auto deadline = Clock::now() + options_.timeout;
  Status s;
  try {
    if (rank() == 0) {
      s = bind_and_publish(store);
      if (s.ok()) s = await_members(store, deadline);
    } else {
      s = connect(store, deadline);
      if (s.ok()) s = await_welcome(deadline);
    }
  } catch (const zmq::error_t& e) {
    s = unavailable(e.what());
  }
  // Every member that meets rank 0 in the private folder is connected now (or never will be), and
  // a connection outlives its socket's name; libzmq would leave the name behind.
  if (!private_path_.empty()) ::unlink(private_path_.c_str());
  return s;
}

Status CurveCommunicator::broadcast(void* data, size_t count, CommDType dtype, int root) {
  if (root != 0) return invalid_argument(str(who(), ": the CURVE transport broadcasts from rank 0 only, not ", root));
  if (!broken_.ok())
    return unavailable(str(who(), ": the group broke in an earlier collective (", broken_.message(), "); re-form it"));
  const size_t bytes = count * comm_dtype_size(dtype);
  const uint64_t seq = ++seq_;
  Status s;
  try {
    s = rank() == 0 ? send_broadcast(static_cast<const uint8_t*>(data), bytes, seq)
                    : receive_broadcast(static_cast<uint8_t*>(data), bytes, seq);
  } catch (const zmq::error_t& e) {
    s = unavailable(e.what());
  }
  if (s.ok()) return s;
  broken_ = s;
  if (rank() == 0) abort_members(s.message());
  return Status(s.code(), str(who(), ": broadcast failed: ", s.message()));
}

// ---------------------------------------------------------------- rank 0

Status CurveCommunicator::bind_and_publish(RendezvousStore& store) {
  socket_ = zmq::socket_t(*context_, zmq::socket_type::router);
  SocketOptions o;
  o.send_hwm = kWindowChunks;
  o.max_frame_bytes = kFrameSlack;  // members send headers only
  o.heartbeat_interval = std::min(milliseconds(1000), std::max(milliseconds(1), timeout_ / 4));
  o.heartbeat_timeout = timeout_;
  RLRUN_RETURN_IF_ERROR(apply_socket_options(socket_, o));
  RLRUN_ASSIGN_OR_RETURN(zap_, apply_curve_server(socket_, *context_, worker_server_security(options_.security),
                                                  str("group `", options_.name, "`")));
  socket_.set(zmq::sockopt::router_mandatory, 1);  // a member that left is an error, not a silent drop
  socket_.set(zmq::sockopt::sndtimeo, static_cast<int>(timeout_.count()));
  socket_.bind(str("tcp://", options_.interface_host, ":0"));
  endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
  const std::string local = bind_private();
  RLRUN_RETURN_IF_ERROR(store.set(str(options_.name, "/curve/local"), std::vector<char>(local.begin(), local.end())));
  RLRUN_RETURN_IF_ERROR(store.set(str(options_.name, "/curve/endpoint"), std::vector<char>(endpoint_.begin(), endpoint_.end())));
  log::info(str(who(), ": CURVE transport on ", endpoint_, "; only holders of the run's keys may connect",
                private_path_.empty() ? std::string()
                                      : str(" (members on this host: ", kIpc, private_path_, ", unencrypted)")));
  return Status();
}

// Also binds socket_ on a Unix socket in the private folder, without CURVE, and returns what a
// member needs to choose it: "<host identity>\n<endpoint>"; empty when there is no private folder.
std::string CurveCommunicator::bind_private() {
  const std::string& dir = options_.security.private_dir;
  if (dir.empty()) return "";
  if (Status s = check_private_dir(dir); !s.ok()) {
    log::warn(str(who(), ": ", s.message(), ": members on this host use TCP with CURVE too"));
    return "";
  }
  const std::string path = str(dir, "/", options_.name, "-", ::getpid(), ".sock");
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    log::info(str(who(), ": ", path, " is too long for a Unix socket: members on this host use TCP with CURVE"));
    return "";
  }
  socket_.set(zmq::sockopt::curve_server, false);  // the ZAP handler admits the NULL mechanism (curve_auth.cc)
  socket_.bind(str(kIpc, path));
  private_path_ = path;
  return str(host_identity(), "\n", kIpc, path);
}

Status CurveCommunicator::await_members(RendezvousStore& store, Clock::time_point deadline) {
  for (int r = 1; r < size(); ++r) {
    Result<std::vector<char>> joined = store.get(str(options_.name, "/curve/joined/", r), left_until(deadline));
    if (!joined.ok()) return Status(joined.status().code(), str("rank ", r, " did not join: ", joined.status().message()));
  }
  std::vector<bool> hello(size(), false);
  int missing = size() - 1;
  while (missing > 0) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    poll_until(&item, 1, deadline);
    if (!(item.revents & ZMQ_POLLIN)) {
      return timeout_error(str(missing, " member(s) joined the store but did not connect to ", endpoint_, " within ",
                               options_.timeout.count(), " ms (is the port blocked between the nodes? do all "
                               "members hold the run's keys?)"));
    }
    const Inbound in = receive_inbound();
    if (in.rank > 0 && in.header.ok() && in.header->kind == CurveKind::kHello && in.header->seq == uint64_t(in.rank) &&
        !hello[in.rank]) {
      hello[in.rank] = true;
      --missing;
    }
  }
  for (int r = 1; r < size(); ++r) RLRUN_RETURN_IF_ERROR(send_to(r, {CurveKind::kWelcome, 0, 0}, nullptr, true));
  return Status();
}

Status CurveCommunicator::send_broadcast(const uint8_t* data, size_t bytes, uint64_t seq) {
  size_t offset = 0;
  do {
    const size_t n = std::min(kCurveChunkBytes, bytes - offset);
    zmq::message_t chunk = n > 0 ? zmq::message_t(data + offset, n) : zmq::message_t();  // shared by every queue
    for (int r = 1; r < size(); ++r) RLRUN_RETURN_IF_ERROR(send_to(r, {CurveKind::kData, seq, offset}, &chunk, true));
    offset += n;
  } while (offset < bytes);
  return await_acks(seq);
}

Status CurveCommunicator::await_acks(uint64_t seq) {
  std::vector<bool> acked(size(), false);
  int missing = size() - 1;
  const auto deadline = Clock::now() + timeout_;
  while (missing > 0) {
    if (Clock::now() >= deadline) {
      std::string ranks;
      for (int r = 1; r < size(); ++r) ranks += acked[r] ? "" : str(ranks.empty() ? "" : ", ", r);
      return timeout_error(str("rank(s) ", ranks, " did not acknowledge broadcast ", seq, " within ", timeout_.count(),
                               " ms (a stopped process?)"));
    }
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    poll_until(&item, 1, std::min(deadline, Clock::now() + kProbeInterval));
    if (item.revents & ZMQ_POLLIN) {
      const Inbound in = receive_inbound();
      if (in.rank > 0 && in.header.ok() && in.header->kind == CurveKind::kAck && in.header->seq == seq && !acked[in.rank]) {
        acked[in.rank] = true;
        --missing;
      }
      continue;
    }
    for (int r = 1; r < size(); ++r) {
      if (acked[r]) continue;
      const Status probe = send_to(r, {CurveKind::kProbe, seq, 0}, nullptr, /*wait=*/false);
      if (probe.code() == StatusCode::kUnavailable) return probe;  // gone; a full queue is alive
    }
  }
  return Status();
}

Status CurveCommunicator::send_to(int member, const CurveHeader& header, zmq::message_t* payload, bool wait) {
  const zmq::send_flags flags = wait ? zmq::send_flags::none : zmq::send_flags::dontwait;
  const std::vector<uint8_t> head = encode_curve_header(header);
  try {
    // The routing frame decides: a full queue blocks (up to sndtimeo) or refuses, a member that
    // left is EHOSTUNREACH. Once it is accepted, libzmq accepts the rest of the message.
    if (!socket_.send(zmq::buffer(member_ids_[member]), flags | zmq::send_flags::sndmore))
      return timeout_error(str("rank ", member, " took no bytes for ", timeout_.count(), " ms (a stopped process?)"));
    socket_.send(zmq::buffer(head), payload ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (payload != nullptr) {
      zmq::message_t shared;
      shared.copy(*payload);  // shares the bytes (reference-counted), copies nothing
      socket_.send(shared, zmq::send_flags::none);
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH)
      return unavailable(str("rank ", member, " is no longer connected (its process died, or it left the group)"));
    return unavailable(str("sending to rank ", member, ": ", e.what()));
  }
  return Status();
}

CurveCommunicator::Inbound CurveCommunicator::receive_inbound() {
  std::vector<zmq::message_t> parts;
  (void)zmq::recv_multipart(socket_, std::back_inserter(parts), zmq::recv_flags::dontwait);
  Inbound in;
  if (parts.size() != 2) return in;  // routing id + header; frames are at most kFrameSlack bytes
  const std::string id = parts[0].to_string();
  for (int r = 1; r < size(); ++r)
    if (member_ids_[r] == id) in.rank = r;
  in.header = decode_curve_header({parts[1].data<uint8_t>(), parts[1].size()});
  return in;
}

void CurveCommunicator::abort_members(const std::string& reason) {
  const std::string text = reason.substr(0, kMaxAbortText);
  zmq::message_t payload(text.data(), text.size());
  for (int r = 1; r < size(); ++r) (void)send_to(r, {CurveKind::kAbort, seq_, 0}, &payload, /*wait=*/false);
  socket_.set(zmq::sockopt::linger, static_cast<int>(kAbortLinger.count()));
}

// ---------------------------------------------------------------- members

Status CurveCommunicator::connect(RendezvousStore& store, Clock::time_point deadline) {
  RLRUN_ASSIGN_OR_RETURN(std::vector<char> endpoint, store.get(str(options_.name, "/curve/endpoint"), left_until(deadline)));
  endpoint_.assign(endpoint.begin(), endpoint.end());
  RLRUN_ASSIGN_OR_RETURN(const bool local, use_private(store, deadline));
  socket_ = zmq::socket_t(*context_, zmq::socket_type::dealer);
  SocketOptions o;
  o.recv_hwm = kWindowChunks;
  o.max_frame_bytes = static_cast<int64_t>(kCurveChunkBytes) + kFrameSlack;
  o.heartbeat_interval = std::min(milliseconds(1000), std::max(milliseconds(1), timeout_ / 4));
  o.heartbeat_timeout = timeout_;
  RLRUN_RETURN_IF_ERROR(apply_socket_options(socket_, o));
  if (!local) RLRUN_RETURN_IF_ERROR(apply_curve_client(socket_, worker_client_security(options_.security)));
  socket_.set(zmq::sockopt::routing_id, member_ids_[rank()]);
  const int events = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
  if (zmq_socket_monitor(socket_.handle(), kMonitorEndpoint, events) != 0)
    return internal_error(str("cannot monitor the connection to rank 0: ", zmq_strerror(zmq_errno())));
  monitor_ = zmq::socket_t(*context_, zmq::socket_type::pair);
  monitor_.connect(kMonitorEndpoint);  // before socket_ connects: no event is missed
  socket_.connect(endpoint_);
  RLRUN_RETURN_IF_ERROR(send_to_rank0({CurveKind::kHello, static_cast<uint64_t>(rank()), 0}));
  return store.set(str(options_.name, "/curve/joined/", rank()), {1});
}

// true (and endpoint_ set to it) when rank 0's Unix socket is on this host, in a folder private
// to this user (the one this member's keys are in): the store is the run's, so its value names
// rank 0's socket, and only this user could have bound one there.
Result<bool> CurveCommunicator::use_private(RendezvousStore& store, Clock::time_point deadline) {
  const std::string& own = options_.security.private_dir;
  if (own.empty()) return false;
  RLRUN_ASSIGN_OR_RETURN(std::vector<char> value, store.get(str(options_.name, "/curve/local"), left_until(deadline)));
  const std::string local(value.begin(), value.end());
  const size_t newline = local.find('\n');
  if (newline == std::string::npos || local.substr(0, newline) != host_identity()) return false;
  const std::string endpoint = local.substr(newline + 1);
  if (!endpoint.starts_with(kIpc)) return false;
  const std::filesystem::path path = endpoint.substr(kIpc.size());
  std::error_code ec;
  struct stat st{};
  if (!std::filesystem::equivalent(path.parent_path(), own, ec) || !check_private_dir(own).ok() ||
      ::stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return false;
  }
  endpoint_ = endpoint;
  log::info(str(who(), ": rank 0 is on this host: weights come through ", endpoint_, " (the keys' folder)"));
  return true;
}

Status CurveCommunicator::await_welcome(Clock::time_point deadline) {
  while (true) {
    RLRUN_RETURN_IF_ERROR(wait_for_rank0(deadline, "welcome (the other members did not all join)"));
    zmq::message_t head;
    (void)socket_.recv(head, zmq::recv_flags::dontwait);
    Result<CurveHeader> h = decode_curve_header({head.data<uint8_t>(), head.size()});
    drain_frames();
    if (!h.ok()) return h.status();
    if (h->kind == CurveKind::kWelcome) return Status();
  }
}

Status CurveCommunicator::receive_broadcast(uint8_t* data, size_t bytes, uint64_t seq) {
  size_t got = 0;
  bool first = true;
  auto deadline = Clock::now() + timeout_;
  while (first || got < bytes) {
    RLRUN_RETURN_IF_ERROR(wait_for_rank0(deadline, str("bytes of broadcast ", seq)));
    zmq::message_t head;
    (void)socket_.recv(head, zmq::recv_flags::dontwait);
    Result<CurveHeader> h = decode_curve_header({head.data<uint8_t>(), head.size()});
    if (h.ok() && h->kind == CurveKind::kAbort && head.more()) {
      zmq::message_t reason;
      (void)socket_.recv(reason, zmq::recv_flags::dontwait);
      drain_frames();
      return unavailable(str("rank 0 aborted broadcast ", seq, ": ", reason.to_string().substr(0, kMaxAbortText)));
    }
    if (h.ok() && h->kind != CurveKind::kData) {  // a probe, a welcome
      drain_frames();
      continue;
    }
    if (!h.ok() || h->seq != seq || h->offset != got || !head.more()) {
      drain_frames();
      return h.ok() ? protocol_error(str("out of step with rank 0: bytes at ", h->offset, " of broadcast ", h->seq,
                                         ", expected ", got, " of ", seq))
                    : h.status();
    }
    const auto n = socket_.recv(zmq::mutable_buffer(data + got, bytes - got), zmq::recv_flags::dontwait);
    const bool bad = !n || n->truncated() || (n->size == 0 && bytes > 0) || socket_.get(zmq::sockopt::rcvmore);
    drain_frames();
    if (bad) {
      return protocol_error(str("broadcast ", seq, ": rank 0 sent a chunk of ", n ? n->untruncated_size : 0,
                                " bytes where ", bytes - got, " remained"));
    }
    got += n->size;
    first = false;
    deadline = Clock::now() + timeout_;  // progress
  }
  return send_to_rank0({CurveKind::kAck, seq, 0});
}

Status CurveCommunicator::wait_for_rank0(Clock::time_point deadline, const std::string& waiting_for) {
  while (true) {
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}, {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
    poll_until(items, 2, deadline);
    if (items[0].revents & ZMQ_POLLIN) return Status();  // bytes already here count, connection or not
    if (items[1].revents & ZMQ_POLLIN) {
      RLRUN_RETURN_IF_ERROR(read_monitor_event());
      continue;
    }
    if (Clock::now() >= deadline)
      return timeout_error(str("no ", waiting_for, " from rank 0 at ", endpoint_, " in time (it died or stopped?)"));
  }
}

Status CurveCommunicator::read_monitor_event() {
  std::vector<zmq::message_t> parts;
  (void)zmq::recv_multipart(monitor_, std::back_inserter(parts), zmq::recv_flags::dontwait);
  if (parts.empty() || parts[0].size() < 2) return Status();
  uint16_t event = 0;
  std::memcpy(&event, parts[0].data(), sizeof(event));  // libzmq's v1 event frame: u16 event, u32 value
  if (event == ZMQ_EVENT_DISCONNECTED) {
    return unavailable(str("the connection to rank 0 at ", endpoint_, " closed (rank 0 left the group or died, or ",
                           "it refused this member's key)"));
  }
  return unavailable(str("the CURVE handshake with rank 0 at ", endpoint_, " failed: it does not hold this run's keys, ",
                         "or this process does not (--control-keys)"));
}

Status CurveCommunicator::send_to_rank0(const CurveHeader& header) {
  const std::vector<uint8_t> head = encode_curve_header(header);
  if (!socket_.send(zmq::buffer(head), zmq::send_flags::dontwait))
    return unavailable(str("cannot queue a message for rank 0 at ", endpoint_, " (not connected, queue full)"));
  return Status();
}

void CurveCommunicator::drain_frames() {
  while (socket_.get(zmq::sockopt::rcvmore)) {
    zmq::message_t part;
    (void)socket_.recv(part, zmq::recv_flags::dontwait);
  }
}

}  // namespace

Result<std::unique_ptr<Communicator>> make_curve_communicator(std::shared_ptr<RendezvousStore> store,
                                                              const GroupOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size)
    return invalid_argument(str("group `", options.name, "`: rank ", options.rank, " of size ", options.size));
  if (options.security.mechanism != SecurityOptions::Mechanism::kCurve)
    return invalid_argument(str("group `", options.name, "`: the CURVE transport needs the run's keys"));
  auto comm = std::make_unique<CurveCommunicator>(options);
  if (Status s = comm->form(*store); !s.ok()) {
    return Status(s.code(), str("group `", options.name, "` rank ", options.rank, "/", options.size,
                                ": forming the CURVE transport failed: ", s.message()));
  }
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace rlrun::engine
