// http_get.h - a tiny blocking HTTP/1.0 GET (and POST) over a POSIX socket, and a free-port finder,
// for tests that talk to real servers on loopback (our /metrics endpoint, a real Prometheus, a
// reward server).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <string>

namespace rlrun::testing {

struct HttpResponse {
  int status = 0;  // 0: no connection or no parsable reply
  std::string body;
};

// Sends `request` (a whole HTTP/1.0 request) to 127.0.0.1:<port> and reads the reply to its end;
// `timeout_s` per socket operation.
inline HttpResponse http_exchange(int port, const std::string& request, int timeout_s = 5) {
  HttpResponse r;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return r;
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return r;
  }
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return r;
  }
  std::string reply;
  char buf[8192];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) reply.append(buf, static_cast<size_t>(n));
  ::close(fd);
  // "HTTP/1.1 200 OK\r\n...\r\n\r\nbody"
  const size_t sp = reply.find(' ');
  const size_t head_end = reply.find("\r\n\r\n");
  if (reply.rfind("HTTP/", 0) != 0 || sp == std::string::npos || head_end == std::string::npos)
    return r;
  r.status = std::atoi(reply.c_str() + sp + 1);
  r.body = reply.substr(head_end + 4);
  return r;
}

// GET http://127.0.0.1:<port><path>.
inline HttpResponse http_get(int port, const std::string& path) {
  return http_exchange(port, "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
}

// POST `body` (as application/json) to http://127.0.0.1:<port><path>.
inline HttpResponse http_post(int port, const std::string& path, const std::string& body, int timeout_s = 5) {
  return http_exchange(port, "POST " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                                 "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                                 "\r\n\r\n" + body, timeout_s);
}

// `text` for a URL's query string: every byte but [A-Za-z0-9-._~] as %XX.
inline std::string url_encode(const std::string& text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// A port that was free a moment ago (bind 127.0.0.1:0, read it, close). For servers that cannot
// take port 0 themselves; another process may grab it in between, which tests accept.
inline int pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace rlrun::testing
