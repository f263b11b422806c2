// http_get.h - blocking HTTP requests through libcurl (the client the product uses,
// orchestrator/reward/http_reward.cc), and a free-port finder, for tests that talk to real
// servers on loopback (our /metrics endpoint, a real Prometheus, a reward server).
#pragma once

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <string>

namespace rlrun::testing {

struct HttpResponse {
  int status = 0;  // 0: no connection or no reply
  std::string body;
};

// `method` http://127.0.0.1:<port><path>, with `body` as application/json unless it is empty; the
// whole exchange within `timeout_s`. Never through a proxy of the environment (http_proxy).
inline HttpResponse http_request(int port, const std::string& method, const std::string& path,
                                 const std::string& body = "", int timeout_s = 5) {
  static const bool started = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  HttpResponse r;
  CURL* curl = started ? curl_easy_init() : nullptr;
  if (curl == nullptr) return r;
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROXY, "");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, static_cast<long>(timeout_s));
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_slist* headers = nullptr;
  if (!body.empty()) {
    headers = curl_slist_append(headers, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  using Append = size_t (*)(char*, size_t, size_t, void*);
  const Append append = [](char* data, size_t size, size_t n, void* out) {
    static_cast<std::string*>(out)->append(data, size * n);
    return size * n;
  };
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r.body);
  const CURLcode done = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);  // also when the server hung up early
  r.status = static_cast<int>(status);
  if (done != CURLE_OK && status == 0) r.body.clear();
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return r;
}

// GET http://127.0.0.1:<port><path>.
inline HttpResponse http_get(int port, const std::string& path) { return http_request(port, "GET", path); }

// POST `body` (as application/json) to http://127.0.0.1:<port><path>.
inline HttpResponse http_post(int port, const std::string& path, const std::string& body, int timeout_s = 5) {
  return http_request(port, "POST", path, body, timeout_s);
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
