// http_server.cc - HttpServer on civetweb's C API.
#include "orchestrator/openai/http_server.h"

#include <civetweb.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "common/observe/log.h"
#include "common/observe/metrics.h"

namespace rlrun::orchestrator::openai {

namespace {

// Answers one civetweb connection; remembers the status for civetweb's return value.
class CivetResponder : public HttpResponder {
 public:
  // `chunked`: HTTP/1.1 (a stream's body is chunked); HTTP/1.0 streams end with the connection.
  CivetResponder(mg_connection* conn, bool must_close, bool chunked)
      : conn_(conn), must_close_(must_close || !chunked), chunked_(chunked) {}

  bool send(int status, std::string_view content_type, std::string_view body) override {
    if (!start(status, content_type, {{"Content-Length", std::to_string(body.size())}})) return false;
    return mg_write(conn_, body.data(), body.size()) == static_cast<int>(body.size());
  }
  bool begin_stream(int status, std::string_view content_type) override {
    std::vector<std::pair<std::string, std::string>> headers{{"Cache-Control", "no-cache"}};
    if (chunked_) headers.emplace_back("Transfer-Encoding", "chunked");
    streaming_ = start(status, content_type, std::move(headers));
    return streaming_;
  }
  bool write(std::string_view bytes) override {
    if (!streaming_ || bytes.empty()) return streaming_;
    const int n = chunked_ ? mg_send_chunk(conn_, bytes.data(), static_cast<unsigned>(bytes.size()))
                           : mg_write(conn_, bytes.data(), bytes.size());
    return n > 0;
  }
  // Ends a chunked body; civetweb's return value for the request.
  int finish() {
    if (streaming_ && chunked_) mg_send_chunk(conn_, "", 0);
    return status_;
  }

 private:
  bool start(int status, std::string_view content_type, std::vector<std::pair<std::string, std::string>> headers) {
    if (status_ != 0) return false;  // one response per request
    status_ = status;
    headers.emplace_back("Content-Type", std::string(content_type));
    if (must_close_) headers.emplace_back("Connection", "close");
    if (mg_response_header_start(conn_, status) != 0) return false;
    for (const auto& [name, value] : headers) mg_response_header_add(conn_, name.c_str(), value.c_str(), -1);
    return mg_response_header_send(conn_) == 0;
  }

  mg_connection* conn_;
  bool must_close_;  // the connection cannot carry another request (body not read, HTTP/1.0 stream)
  bool chunked_;
  bool streaming_ = false;
  int status_ = 0;
};

// Reads the body, at most `max` bytes; false when it is longer (then it is not read to the end).
bool read_body(mg_connection* conn, long long content_length, size_t max, std::string* body) {
  if (content_length > static_cast<long long>(max)) return false;
  char buf[16384];
  while (true) {
    const int n = mg_read(conn, buf, sizeof buf);
    if (n <= 0) return true;
    if (body->size() + static_cast<size_t>(n) > max) return false;
    body->append(buf, static_cast<size_t>(n));
  }
}

int on_request(mg_connection* conn, void* cbdata) {
  auto* handler = static_cast<HttpHandler*>(cbdata);
  const mg_request_info* info = mg_get_request_info(conn);
  HttpRequest request;
  request.method = info->request_method ? info->request_method : "";
  request.path = info->local_uri ? info->local_uri : "";
  request.body_too_large = !read_body(conn, info->content_length, handler->max_body_bytes(), &request.body);
  if (request.body_too_large) request.body.clear();
  const bool http11 = info->http_version != nullptr && std::string_view(info->http_version) == "1.1";
  CivetResponder out(conn, request.body_too_large, http11);
  handler->handle(request, out);
  const int status = out.finish();
  if (status == 0) {  // the handler did not answer: a bug, but the client still gets a response
    log::error(str("HTTP handler gave no response to ", request.method, " ", request.path));
    out.send(500, "text/plain", "internal error: no response\n");
    return 500;
  }
  return status;
}

int on_log(const mg_connection*, const char* message) {
  log::debug(str("civetweb: ", message ? message : ""));
  return 1;  // handled: civetweb prints nothing itself
}

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpServerOptions& options, HttpHandler& handler) {
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  std::unique_ptr<HttpServer> server(new HttpServer());
  int port = 0;
  RLRUN_RETURN_IF_ERROR(parse_listen_address(options.bind_flag, options.bind, &server->host_, &port));
  if (options.threads < 1 || options.threads > 4096)
    return invalid_argument(str("HTTP threads ", options.threads, " must be in [1, 4096]"));
  const std::string threads = std::to_string(options.threads), timeout = std::to_string(options.io_timeout_ms);
  const char* mg_options[] = {"listening_ports", options.bind.c_str(), "num_threads", threads.c_str(),
                              "request_timeout_ms", timeout.c_str(), "enable_keep_alive", "yes",
                              "keep_alive_timeout_ms", "5000", nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = on_log;
  server->ctx_ = mg_start(&callbacks, nullptr, mg_options);
  if (server->ctx_ == nullptr) {
    const std::string cause = listen_failure_cause(server->host_, port);
    return unavailable(str(options.bind_flag, " ", options.bind, ": cannot listen: ",
                           cause.empty() ? "the HTTP server (civetweb) failed to start" : cause,
                           "; choose a free address, e.g. ", server->host_, ":0 to let the system pick a port"));
  }
  mg_set_request_handler(server->ctx_, "/", on_request, &handler);
  mg_server_port ports[4];
  const int n = mg_get_server_ports(server->ctx_, 4, ports);
  if (n < 1) return internal_error(str(options.bind_flag, " ", options.bind, ": civetweb reports no listening port"));
  server->port_ = ports[0].port;
  return server;
}

HttpServer::~HttpServer() {
  if (ctx_ == nullptr) return;
  std::atomic<bool> stopped{false};
  std::thread poker([&] {  // wakes civetweb's listener, which polls with a 2 s timeout
    while (!stopped.load()) {
      poke_listener(host_, port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  mg_stop(ctx_);
  stopped.store(true);
  poker.join();
}

std::string HttpServer::address() const {
  return host_.find(':') != std::string::npos ? str("[", host_, "]:", port_) : str(host_, ":", port_);
}

}  // namespace rlrun::orchestrator::openai
