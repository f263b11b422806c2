#include "common/observe/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <prometheus/check_names.h>
#include <prometheus/exposer.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <sstream>
#include <thread>

#include "common/check.h"
#include "common/observe/log.h"
#include "common/observe/memory.h"
#include "common/observe/thread_stack.h"

namespace rlrun {
namespace {

// Registers a family, turning prometheus-cpp's exceptions (bad name, type clash) into a check
// failure: metric names are code constants, so these are bugs.
template <class Builder>
auto& register_family(Builder builder, prometheus::Registry& registry, std::string_view name,
                      const std::string& help, const prometheus::Labels& const_labels) {
  const std::string full = metric_name(name);
  for (const auto& [label, value] : const_labels) {
    RLRUN_CHECK(prometheus::CheckLabelName(label), "invalid label name `" + label + "` on " + full);
  }
  try {
    return builder.Name(full).Help(help).Labels(const_labels).Register(registry);
  } catch (const std::exception& e) {
    check_failed(__FILE__, __LINE__, "register metric family",
                 str("cannot register ", full, ": ", e.what()));
  }
}

// A TCP socket of the family of `host` (an IP address, as parse_metrics_bind accepts), and the
// socket address of host:port in *addr. With `any_is_loopback`, 0.0.0.0 and :: become loopback
// (to reach a server that listens on every interface). Returns -1 when no socket can be made.
int tcp_socket_for(const std::string& host, int port, bool any_is_loopback, sockaddr_storage* addr,
                   socklen_t* len) {
  *addr = sockaddr_storage{};
  const uint16_t net_port = htons(static_cast<uint16_t>(port));
  if (host.find(':') != std::string::npos) {
    auto* a = reinterpret_cast<sockaddr_in6*>(addr);
    a->sin6_family = AF_INET6;
    a->sin6_port = net_port;
    ::inet_pton(AF_INET6, host.c_str(), &a->sin6_addr);
    if (any_is_loopback && host == "::") a->sin6_addr = in6addr_loopback;
    *len = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(addr);
    a->sin_family = AF_INET;
    a->sin_port = net_port;
    ::inet_pton(AF_INET, host.c_str(), &a->sin_addr);
    if (any_is_loopback && host == "0.0.0.0") a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    *len = sizeof(sockaddr_in);
  }
  return ::socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

}  // namespace

std::string listen_failure_cause(const std::string& host, int port) {
  sockaddr_storage addr;
  socklen_t len;
  const int fd = tcp_socket_for(host, port, /*any_is_loopback=*/false, &addr, &len);
  if (fd < 0) return str("socket(): ", std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as civetweb does
  const int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len);
  const int err = errno;
  ::close(fd);
  if (rc == 0) return "";
  std::string cause = std::strerror(err);
  if (err == EADDRINUSE) cause += " (another process, perhaps another rlrun run, listens there)";
  if (err == EADDRNOTAVAIL) cause += " (no interface of this machine has that address)";
  if (err == EACCES) cause += " (ports below 1024 need privileges)";
  return cause;
}

void poke_listener(const std::string& host, int port) {
  sockaddr_storage addr;
  socklen_t len;
  const int fd = tcp_socket_for(host, port, /*any_is_loopback=*/true, &addr, &len);
  if (fd < 0) return;
  // Refused once the listener is closed: nothing to do either way.
  (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), len);
  ::close(fd);
}

std::string metric_name(std::string_view name) {
  std::string full(name);
  if (full.rfind(kMetricPrefix, 0) != 0) full = std::string(kMetricPrefix) + full;
  RLRUN_CHECK(full.size() > kMetricPrefix.size() && prometheus::CheckMetricName(full),
              "invalid metric name `" + full + "`");
  return full;
}

prometheus::Family<prometheus::Counter>& counter_family(prometheus::Registry& registry,
                                                        std::string_view name,
                                                        const std::string& help,
                                                        const prometheus::Labels& const_labels) {
  return register_family(prometheus::BuildCounter(), registry, name, help, const_labels);
}

prometheus::Family<prometheus::Gauge>& gauge_family(prometheus::Registry& registry,
                                                    std::string_view name, const std::string& help,
                                                    const prometheus::Labels& const_labels) {
  return register_family(prometheus::BuildGauge(), registry, name, help, const_labels);
}

prometheus::Family<prometheus::Histogram>& histogram_family(
    prometheus::Registry& registry, std::string_view name, const std::string& help,
    const prometheus::Labels& const_labels) {
  return register_family(prometheus::BuildHistogram(), registry, name, help, const_labels);
}

prometheus::Histogram::BucketBoundaries exponential_buckets(double start, double factor,
                                                            int count) {
  RLRUN_CHECK(start > 0 && factor > 1 && count > 0, "exponential_buckets needs start>0, factor>1");
  prometheus::Histogram::BucketBoundaries bounds;
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) bounds.push_back(b);
  return bounds;
}

prometheus::MetricFamily gauge_snapshot(std::string_view name, const std::string& help,
                                        const std::vector<GaugeSample>& samples) {
  prometheus::MetricFamily family;
  family.name = metric_name(name);
  family.help = help;
  family.type = prometheus::MetricType::Gauge;
  for (const GaugeSample& s : samples) {
    prometheus::ClientMetric m;
    for (const auto& [k, v] : s.labels) m.label.push_back({k, v});
    m.gauge.value = s.value;
    family.metric.push_back(std::move(m));
  }
  return family;
}

std::shared_ptr<prometheus::Collectable> process_memory_collectable(
    std::string process, std::shared_ptr<const PeakMemoryTracker> tracker) {
  return std::make_shared<CallbackCollectable>([process, tracker] {
    std::vector<prometheus::MetricFamily> out;
    Result<ProcessMemory> mem = read_process_memory();
    if (mem.ok()) {
      const prometheus::Labels labels{{"process", process}};
      out.push_back(gauge_snapshot("process_resident_bytes",
                                   "Resident set size of the process (VmRSS), bytes",
                                   {{labels, static_cast<double>(mem->resident_bytes)}}));
      out.push_back(
          gauge_snapshot("process_peak_resident_bytes",
                         "Peak resident set size of the process since start (VmHWM), bytes",
                         {{labels, static_cast<double>(mem->peak_resident_bytes)}}));
    }
    if (tracker) {
      std::vector<GaugeSample> samples;
      for (const auto& p : tracker->peaks()) {
        samples.push_back(
            {{{"process", process}, {"phase", p.phase}}, static_cast<double>(p.peak_bytes)});
      }
      if (!samples.empty()) {
        out.push_back(gauge_snapshot("phase_peak_resident_bytes",
                                     "Peak resident set size during a phase, max over steps, bytes",
                                     samples));
      }
    }
    return out;
  });
}

std::string serialize_metrics(const prometheus::Collectable& collectable) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, collectable.Collect());
  return out.str();
}

Status parse_metrics_bind(const std::string& bind, std::string* host, int* port) {
  return parse_listen_address("metrics_bind", bind, host, port);
}

Status parse_listen_address(std::string_view key, const std::string& bind, std::string* host, int* port) {
  auto bad = [&](const std::string& why) {
    return invalid_argument(str(key, ": `", bind, "` is not a valid listen address: ", why,
                                "; write host:port with an IP address, e.g. 127.0.0.1:9400, "
                                "0.0.0.0:9400 or [::1]:9400 (port 0 lets the system choose)"));
  };
  const size_t colon = bind.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("expected host:port");
  std::string h = bind.substr(0, colon);
  const std::string p = bind.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(p) > 65535) {
    return bad("the port must be a number from 0 to 65535");
  }
  unsigned char addr[sizeof(in6_addr)];
  if (h.front() == '[') {
    if (h.back() != ']') return bad("an IPv6 address must be written in brackets, [::1]");
    h = h.substr(1, h.size() - 2);
    if (::inet_pton(AF_INET6, h.c_str(), addr) != 1)
      return bad("`" + h + "` is not an IPv6 address");
  } else if (::inet_pton(AF_INET, h.c_str(), addr) != 1) {
    return bad("`" + h + "` is not an IPv4 address (host names are not resolved)");
  }
  *host = h;
  *port = std::stoi(p);
  return Status();
}

bool is_loopback_address(const std::string& host) {
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(
    const std::string& bind, std::shared_ptr<prometheus::Registry> registry) {
  std::string host;
  int port = 0;
  RLRUN_RETURN_IF_ERROR(parse_metrics_bind(bind, &host, &port));
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->host_ = host;
  server->registry_ = registry ? std::move(registry) : std::make_shared<prometheus::Registry>();
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(bind, /*num_threads=*/2);
  } catch (const std::exception& e) {
    const std::string cause = listen_failure_cause(host, port);
    if (cause.empty()) {  // the address itself is usable: the HTTP server itself failed
      const bool v6 = host.find(':') != std::string::npos;
      return internal_error(str("metrics_bind: cannot listen on ", bind,
                             ": the HTTP server (civetweb) failed: ", e.what(),
                             v6 ? "; this build may lack IPv6 support: use an IPv4 address such "
                                  "as 127.0.0.1 or 0.0.0.0"
                                : "; try another port, e.g. port 0 to let the system choose"));
    }
    return unavailable(str("metrics_bind: cannot listen on ", bind, ": ", cause,
                           "; set metrics_bind to a free address, e.g. ", host,
                           ":0 to let the system choose a port, or stop what listens there"));
  }
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty())
    return internal_error(str("metrics_bind: listening on ", bind, " gave no port"));
  server->port_ = ports.front();
  if (!is_loopback_address(host)) {
    log::warn(str("metrics_bind ", bind, " is not a loopback address: /metrics (run progress and worker ",
                  "figures; no keys) is readable without authentication by anyone who can reach port ", server->port_,
                  "; use 127.0.0.1 and scrape through an SSH tunnel, or firewall the port"));
  }
  server->exposer_->RegisterCollectable(server->registry_);
  if (!stack_padding_active()) {
    log::warn(str("this binary does not export pthread_attr_setstacksize: /metrics threads get ",
                  "their stacks minus ", static_tls_bytes(), " bytes of static TLS (thread_stack.h)"));
  }
  return server;
}

MetricsServer::~MetricsServer() {
  std::atomic<bool> stopped{false};
  std::thread poker([&] {
    while (!stopped.load()) {
      poke_listener(host_, port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  exposer_.reset();
  stopped.store(true);
  poker.join();
}

std::string MetricsServer::address() const {
  return host_.find(':') != std::string::npos ? str("[", host_, "]:", port_)
                                              : str(host_, ":", port_);
}

std::string MetricsServer::url() const { return str("http://", address(), "/metrics"); }

void MetricsServer::add_collectable(std::shared_ptr<prometheus::Collectable> collectable) {
  exposer_->RegisterCollectable(collectable);
  collectables_.push_back(std::move(collectable));
}

}  // namespace rlrun
