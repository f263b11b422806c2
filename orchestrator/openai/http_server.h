// http_server.h - a small HTTP/1.1 server (civetweb) in front of one HttpHandler.
//
// The server reads the request and its body (at most handler.max_body_bytes(); a larger one is not
// read and the handler sees body_too_large), then calls the handler on one of `threads` worker
// threads; the handler answers through an HttpResponder, whole (send) or in chunks (begin_stream +
// write, HTTP chunked encoding: SSE streams). Connections are kept alive between requests.
//
// civetweb starts its threads with a fixed small stack; common/observe/thread_stack.h pads it
// for this process's static TLS (every rlrun binary exports the padding), and request bodies are
// checked for nesting before anything recursive walks them (api_request.cc).
//
// Threads: handle() runs on many worker threads at once. The handler must outlive the server.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

struct mg_context;

namespace rlrun::orchestrator::openai {

struct HttpRequest {
  std::string_view method;  // "GET", "POST", ...
  std::string_view path;    // without the query string
  std::string body;
  bool body_too_large = false;  // not read: the handler should answer 413
};

class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  // The whole response. False when the client is gone.
  virtual bool send(int status, std::string_view content_type, std::string_view body) = 0;
  // Starts a chunked response; its body is what write() sends until the handler returns.
  virtual bool begin_stream(int status, std::string_view content_type) = 0;
  virtual bool write(std::string_view bytes) = 0;
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  virtual void handle(const HttpRequest& request, HttpResponder& out) = 0;
  virtual size_t max_body_bytes() const = 0;
};

struct HttpServerOptions {
  std::string bind = "127.0.0.1:8000";  // host:port, port 0: the kernel chooses
  std::string bind_flag = "--bind";     // how errors name the address
  int threads = 64;                     // requests served at once (streams and keep-alive included)
  int io_timeout_ms = 60000;            // one read or write of a connection
};

class HttpServer {
 public:
  // Listens and serves until destroyed. A bad or busy address is an error naming options.bind_flag.
  static Result<std::unique_ptr<HttpServer>> start(const HttpServerOptions& options, HttpHandler& handler);
  ~HttpServer();  // stops accepting, waits for the requests being served

  int port() const { return port_; }
  std::string address() const;  // "127.0.0.1:8000", "[::1]:8000"

 private:
  HttpServer() = default;
  mg_context* ctx_ = nullptr;
  std::string host_;
  int port_ = 0;
};

}  // namespace rlrun::orchestrator::openai
