// curve_auth.cc - CURVE socket options and the per-context ZAP handler thread.
#include "common/protocol/curve_auth.h"

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <zmq_addon.hpp>

#include "common/observe/log.h"
#include "common/protocol/curve_keys.h"

namespace rlrun {

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";  // fixed by RFC 27
constexpr auto kZapPollInterval = std::chrono::milliseconds(20);  // how soon the thread sees stop
constexpr auto kRejectWarnInterval = std::chrono::seconds(5);    // rate limit of rejection warnings

std::string to_string(const zmq::message_t& m) { return std::string(static_cast<const char*>(m.data()), m.size()); }

// Answers ZAP requests for one context on its own thread. allowed_ maps a ZAP domain (one per
// CURVE server socket) to the binary 32-byte client public key it admits and the socket's name
// for logs ("control plane", "weight transport").
class ZapHandler {
 public:
  static Result<std::shared_ptr<ZapHandler>> start(zmq::context_t& context) {
    try {
      zmq::socket_t socket(context, zmq::socket_type::rep);
      socket.set(zmq::sockopt::linger, 0);
      socket.bind(kZapEndpoint);
      return std::shared_ptr<ZapHandler>(new ZapHandler(std::move(socket)));
    } catch (const zmq::error_t& e) {
      return unavailable(str("cannot start the control plane's ZAP handler at ", kZapEndpoint, ": ", e.what(),
                             " (another ZAP handler in this zmq context? give the CURVE server its own context)"));
    }
  }
  // Unbinds under the registry lock, so a handler started next for the same context never finds
  // the endpoint still taken.
  ~ZapHandler();

  void allow(const std::string& domain, const std::string& client_key, std::string what) {
    std::lock_guard lock(mutex_);
    allowed_[domain] = Admitted{client_key, std::move(what)};
  }
  void forget(const std::string& domain) {
    std::lock_guard lock(mutex_);
    allowed_.erase(domain);
  }

 private:
  explicit ZapHandler(zmq::socket_t socket) : socket_(std::move(socket)), thread_([this] { run(); }) {}

  void run() {
    try {
      while (!stop_) {
        zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, kZapPollInterval);
        if (!(item.revents & ZMQ_POLLIN)) continue;
        std::vector<zmq::message_t> request;
        if (!zmq::recv_multipart(socket_, std::back_inserter(request), zmq::recv_flags::dontwait)) continue;
        zmq::send_multipart(socket_, answer(request));
      }
    } catch (const zmq::error_t& e) {
      if (e.num() != ETERM) log::error(str("control plane: the ZAP handler stopped: ", e.what()));
    }
  }

  // RFC 27 request: version, request id, domain, address, routing id, mechanism, credentials...
  // Reply: version, request id, status code, status text, user id, metadata.
  std::array<zmq::message_t, 6> answer(const std::vector<zmq::message_t>& request) {
    std::string code = "400", text = "malformed ZAP request";
    if (request.size() >= 6 && to_string(request[0]) == "1.0") std::tie(code, text) = decide(request);
    std::array<zmq::message_t, 6> reply;
    reply[0] = zmq::message_t(std::string("1.0"));
    reply[1] = zmq::message_t(request.size() >= 2 ? to_string(request[1]) : std::string());
    reply[2] = zmq::message_t(code);
    reply[3] = zmq::message_t(text);
    return reply;  // empty user id and metadata
  }

  std::pair<std::string, std::string> decide(const std::vector<zmq::message_t>& request) {
    const std::string domain = to_string(request[2]), address = to_string(request[3]);
    const std::string mechanism = to_string(request[5]);
    if (mechanism == "NULL") return {"200", "OK"};  // a socket without security: nothing to check
    Admitted allowed;
    {
      std::lock_guard lock(mutex_);
      auto it = allowed_.find(domain);
      if (it != allowed_.end()) allowed = it->second;
    }
    const std::string key = request.size() >= 7 ? to_string(request[6]) : std::string();
    if (mechanism == "CURVE" && !allowed.key.empty() && key == allowed.key) return {"200", "OK"};
    warn_rejected(allowed.what, address, mechanism, key);
    return {"400", "client key not admitted"};
  }

  void warn_rejected(const std::string& what, const std::string& address, const std::string& mechanism,
                     const std::string& key) {
    ++rejected_;
    const auto now = Clock::now();
    if (last_warning_ != Clock::time_point{} && now - last_warning_ < kRejectWarnInterval) return;
    last_warning_ = now;
    std::string fingerprint = "(none)";
    if (key.size() == 32) {
      char z85[kZ85KeyChars + 1];
      zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(key.data()), key.size());
      fingerprint = key_fingerprint(z85);
    }
    log::warn(str(what.empty() ? "control plane" : what, ": rejected a ", mechanism, " peer from ", address, " with client key ", fingerprint,
                  " (not this run's key; ", rejected_, " rejected so far)"));
  }

  struct Admitted {
    std::string key;   // binary, 32 bytes
    std::string what;  // the socket, for logs
  };
  std::mutex mutex_;
  std::map<std::string, Admitted> allowed_;  // guarded by mutex_
  zmq::socket_t socket_;                        // used only by thread_ after construction
  std::atomic<bool> stop_{false};
  uint64_t rejected_ = 0;                       // thread_ only
  Clock::time_point last_warning_{};            // thread_ only
  std::thread thread_;                          // last: starts after the members above exist
};

// One handler per context, alive while any registration holds it.
std::mutex g_handlers_mutex;
std::map<void*, std::weak_ptr<ZapHandler>> g_handlers;  // context handle -> handler

ZapHandler::~ZapHandler() {
  std::lock_guard lock(g_handlers_mutex);
  stop_ = true;
  thread_.join();
  try {
    socket_.unbind(kZapEndpoint);
  } catch (const zmq::error_t&) {
    // ETERM: the context is going away, and the endpoint with it.
  }
  socket_.close();
}

Result<std::shared_ptr<ZapHandler>> handler_for(zmq::context_t& context) {
  std::lock_guard lock(g_handlers_mutex);
  if (auto existing = g_handlers[context.handle()].lock()) return existing;
  RLRUN_ASSIGN_OR_RETURN(std::shared_ptr<ZapHandler> handler, ZapHandler::start(context));
  g_handlers[context.handle()] = handler;
  return handler;
}

Status check_key(const std::string& z85, const char* what) {
  std::array<uint8_t, 32> bytes;
  if (z85.size() != kZ85KeyChars || !zmq_z85_decode(bytes.data(), z85.c_str()))
    return invalid_argument(str("control plane CURVE: ", what, " is not a 40-character Z85 key"));
  return Status();
}

}  // namespace

class ZapRegistration {
 public:
  ZapRegistration(std::shared_ptr<ZapHandler> handler, std::string domain)
      : handler_(std::move(handler)), domain_(std::move(domain)) {}
  ~ZapRegistration() { handler_->forget(domain_); }

 private:
  std::shared_ptr<ZapHandler> handler_;
  std::string domain_;
};

void ZapRegistrationDeleter::operator()(ZapRegistration* r) const { delete r; }

Result<ZapRegistrationPtr> apply_curve_server(zmq::socket_t& socket, zmq::context_t& context,
                                              const SecurityOptions& security, std::string_view what) {
  RLRUN_RETURN_IF_ERROR(check_curve_available());
  RLRUN_RETURN_IF_ERROR(check_key_pair(security.server_public, security.server_secret, str(what, " server keys")));
  RLRUN_RETURN_IF_ERROR(check_key(security.client_public, "the admitted client public key"));
  std::array<uint8_t, 32> client_key;
  zmq_z85_decode(client_key.data(), security.client_public.c_str());

  static std::atomic<uint64_t> next_domain{0};
  const std::string domain = str("rlrun-control-", ++next_domain);
  RLRUN_ASSIGN_OR_RETURN(std::shared_ptr<ZapHandler> handler, handler_for(context));
  handler->allow(domain, std::string(reinterpret_cast<const char*>(client_key.data()), client_key.size()),
                 std::string(what));
  ZapRegistrationPtr registration(new ZapRegistration(std::move(handler), domain));

  socket.set(zmq::sockopt::zap_domain, domain);
  socket.set(zmq::sockopt::curve_server, true);
  socket.set(zmq::sockopt::curve_secretkey, security.server_secret);
  log::info(str(what, ": CURVE server key ", key_fingerprint(security.server_public), ", admitting client key ",
                key_fingerprint(security.client_public), " only"));
  return registration;
}

Status apply_curve_client(zmq::socket_t& socket, const SecurityOptions& security) {
  RLRUN_RETURN_IF_ERROR(check_curve_available());
  RLRUN_RETURN_IF_ERROR(check_key(security.server_public, "the server public key"));
  RLRUN_RETURN_IF_ERROR(check_key_pair(security.client_public, security.client_secret, "control plane client keys"));
  socket.set(zmq::sockopt::curve_serverkey, security.server_public);
  socket.set(zmq::sockopt::curve_publickey, security.client_public);
  socket.set(zmq::sockopt::curve_secretkey, security.client_secret);
  return Status();
}

}  // namespace rlrun
