// bench_serve - `rlrun serve` under load, over real HTTP on loopback: the binary is started as a
// child process and driven by client threads (one HTTP/1.0 connection per request).
//   1. one client, requests back to back: requests/s, latency p50/p95, generated tokens/s;
//   2. N concurrent clients: the same figures; the server's last log line says how many sequences
//      its engine batched at most;
//   3. the ratios (concurrent over one client): what continuous batching buys on this machine.
// Short prompts ("Question k: what is a + b?"), max_tokens completion tokens each at temperature 1
// with a fixed seed per request (the same work in both phases). Prints figures; never fails on
// time.
//
// Usage: bench_serve [--checkpoint PATH] [--threads T] [--clients N] [--requests R] [--max-tokens M]
//   defaults: build/models/smollm2-135m-instruct.Q4_1.gguf, 2 compute threads, 16 clients,
//   4 requests per client (16 for the single client), 32 tokens.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/http_get.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Options {
  std::string binary = std::string(RLRUN_BENCH_SOURCE_DIR) + "/build/rlrun";
  std::string checkpoint = std::string(RLRUN_BENCH_SOURCE_DIR) + "/build/models/smollm2-135m-instruct.Q4_1.gguf";
  int threads = 2, clients = 16, requests = 4, max_tokens = 32;
};

struct Done {
  double seconds = 0;
  int64_t tokens = 0;
  bool ok = false;
};

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Starts `rlrun serve` on a free port; returns its pid and port (0 when it did not come up).
std::pair<pid_t, int> start_server(const Options& o, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string threads = std::to_string(o.threads), seqs = std::to_string(std::max(16, o.clients));
    std::freopen(log.c_str(), "w", stderr);
    ::execl(o.binary.c_str(), o.binary.c_str(), "serve", "--checkpoint", o.checkpoint.c_str(), "--bind", "127.0.0.1:0",
            "--threads", threads.c_str(), "--max-num-seqs", seqs.c_str(), "--max-model-len", "512", nullptr);
    ::_exit(127);
  }
  const std::regex listening("on http://127\\.0\\.0\\.1:([0-9]+)/v1");
  for (int i = 0; i < 1200; ++i) {  // 120 s
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    std::smatch m;
    const std::string s = text.str();
    if (std::regex_search(s, m, listening)) return {pid, std::stoi(m[1])};
    if (::waitpid(pid, nullptr, WNOHANG) == pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::fprintf(stderr, "bench_serve: rlrun serve did not start; its log (%s) says why\n", log.c_str());
  return {pid, 0};
}

Done one_request(int port, const std::string& model, int k, int max_tokens) {
  const json body{{"model", model}, {"prompt", "Question " + std::to_string(k) + ": what is " + std::to_string(k % 97) +
                                                   " + " + std::to_string(k % 13) + "? Answer:"},
                  {"max_tokens", max_tokens}, {"temperature", 1.0}, {"seed", k}};
  const auto start = Clock::now();
  const auto r = rlrun::testing::http_post(port, "/v1/completions", body.dump(), /*timeout_s=*/300);
  Done d;
  d.seconds = since(start);
  const json j = json::parse(r.body, nullptr, false);
  d.ok = r.status == 200 && j.is_object();
  if (d.ok) d.tokens = j["usage"]["completion_tokens"].get<int64_t>();
  return d;
}

struct Figures {
  double rps = 0, tokens_per_s = 0, p50 = 0, p95 = 0;
  int failed = 0;
};

// `clients` threads, each sending `each` requests back to back.
Figures load(int port, const std::string& model, int clients, int each, int max_tokens) {
  std::vector<std::vector<Done>> per(clients);
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = 0; i < each; ++i) per[c].push_back(one_request(port, model, c * each + i, max_tokens));
    });
  }
  for (std::thread& t : threads) t.join();
  const double wall = since(start);
  std::vector<double> latencies;
  Figures f;
  int64_t tokens = 0;
  for (const auto& list : per) {
    for (const Done& d : list) {
      f.failed += d.ok ? 0 : 1;
      tokens += d.tokens;
      latencies.push_back(d.seconds);
    }
  }
  std::sort(latencies.begin(), latencies.end());
  const auto pct = [&](double q) { return latencies[std::min(latencies.size() - 1, size_t(q * latencies.size()))]; };
  f.rps = static_cast<double>(latencies.size()) / wall;
  f.tokens_per_s = static_cast<double>(tokens) / wall;
  f.p50 = pct(0.50);
  f.p95 = pct(0.95);
  return f;
}

void print(const char* label, int clients, int requests, const Figures& f) {
  std::printf("%-14s %7d %8d %10.2f %12.1f %9.3f %9.3f %7d\n", label, clients, requests, f.rps, f.tokens_per_s, f.p50,
              f.p95, f.failed);
}

int parse_args(int argc, char** argv, Options* o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--checkpoint") o->checkpoint = value;
    else if (flag == "--binary") o->binary = value;
    else if (flag == "--threads") o->threads = std::stoi(value);
    else if (flag == "--clients") o->clients = std::stoi(value);
    else if (flag == "--requests") o->requests = std::stoi(value);
    else if (flag == "--max-tokens") o->max_tokens = std::stoi(value);
    else return std::fprintf(stderr, "bench_serve: unknown flag %s (see the header of bench/bench_serve.cc)\n", argv[i]), 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int rc = parse_args(argc, argv, &o)) return rc;
  const std::string log = "/tmp/bench_serve." + std::to_string(::getpid()) + ".log";
  const auto [pid, port] = start_server(o, log);
  if (port == 0) return 1;
  const json models = json::parse(rlrun::testing::http_get(port, "/v1/models").body, nullptr, false);
  const std::string model = models.is_object() ? models["data"][0]["id"].get<std::string>() : "";
  one_request(port, model, 999, 4);  // warm-up
  std::printf("rlrun serve %s: %d compute threads, %d completion tokens per request, short prompts\n",
              o.checkpoint.c_str(), o.threads, o.max_tokens);
  std::printf("%-14s %7s %8s %10s %12s %9s %9s %7s\n", "phase", "clients", "requests", "requests/s", "tokens/s",
              "p50 s", "p95 s", "failed");
  const int alone = std::max(o.requests, 16);
  const Figures one = load(port, model, 1, alone, o.max_tokens);
  print("one client", 1, alone, one);
  const Figures many = load(port, model, o.clients, o.requests, o.max_tokens);
  print("concurrent", o.clients, o.clients * o.requests, many);
  std::printf("concurrent / one client: %.2fx requests/s, %.2fx tokens/s, p50 latency %.2fx\n", many.rps / one.rps,
              many.tokens_per_s / one.tokens_per_s, many.p50 / one.p50);
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find("sequences in one batch") != std::string::npos) std::printf("server: %s\n", line.c_str());
  }
  std::printf("server log: %s\n", log.c_str());
  return 0;
}
