// weight_sync_bench - what authenticating the weights costs. One weight sync is trainer rank 0
// sending its flat f32 parameters to every rollout worker with the product's WeightSender and
// WeightReceiver (buckets of weight_broadcast_bucket_mb), over loopback TCP between threads of this
// process, on Gloo (control_plane_security: none: plain TCP), on the CURVE transport (curve, the
// default: encrypted and authenticated with the run's keys) between hosts, and on the same
// transport between processes of one host (local: a Unix socket in the keys' private folder,
// unencrypted), measured in the same run.
// A sync's time runs from the sender's start to the last receiver's end. Prints seconds per sync,
// MB/s of parameters and the ratios between the transports; never fails on time.
//
//   weight_sync_bench [--receivers N] [--syncs K] [--bucket-mb M] [--params P1,P2,...]
//   (defaults: 1 receiver, 3 timed syncs after one untimed, 256 MiB buckets, 1M and 135M params)
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/observe/log.h"
#include "common/protocol/curve_keys.h"
#include "engine/backend.h"
#include "engine/comm/communicator.h"
#include "engine/comm/weight_receiver.h"
#include "trainer/weight_sender.h"

using namespace rlrun;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  int receivers = 1;
  int syncs = 3;
  int64_t bucket_mb = 256;
  std::vector<int64_t> params = {1'000'000, 135'000'000};
};

struct Timing {
  double mean_s = 0, min_s = 1e30;
  bool ok = true;  // every sync succeeded and the last bytes arrived intact
};

std::unique_ptr<engine::Backend> cpu() { return std::move(engine::create_backend("cpu", 1)).value(); }

// Runs 1 + o.syncs syncs of `params` floats over one group; times all but the first (which also
// carries the layout metadata).
Timing measure(const Options& o, int64_t params, const SecurityOptions& security, const std::string& name) {
  const int size = o.receivers + 1;
  const engine::FlatLayout layout{{{"w", {params}, 0, params}}, params, "f32"};
  auto store = engine::make_in_process_store();
  std::barrier sync_point(size);
  std::vector<Clock::time_point> start(o.syncs + 1), end(size * (o.syncs + 1));
  std::atomic<bool> ok{true};
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      engine::GroupOptions g;
      g.name = name;
      g.rank = r;
      g.size = size;
      g.timeout = std::chrono::seconds(60);
      g.security = security;
      auto comm = engine::make_communicator(store, g);
      if (!comm.ok()) {
        std::fprintf(stderr, "%s\n", comm.status().message().c_str());
        ok = false;
        sync_point.arrive_and_drop();  // the others go on, and fail within their timeouts
        return;
      }
      auto backend = cpu();
      engine::Tensor buffer = backend->zeros(engine::Shape{params}, engine::DType::kF32);
      float* values = static_cast<float*>(buffer.data());
      if (r == 0) {
        for (int64_t i = 0; i < params; ++i) values[i] = static_cast<float>(i % 1000) * 0.001f;
        trainer::WeightSender sender(*backend, layout, **comm, o.bucket_mb << 20);
        for (int k = 0; k <= o.syncs; ++k) {
          sync_point.arrive_and_wait();
          start[k] = Clock::now();
          if (auto s = sender.send(buffer, k + 1); !s.ok()) std::fprintf(stderr, "%s\n", s.status().message().c_str()), ok = false;
          end[k * size] = Clock::now();
        }
      } else {
        engine::WeightReceiver receiver(*backend, layout, **comm);
        for (int k = 0; k <= o.syncs; ++k) {
          sync_point.arrive_and_wait();
          if (auto s = receiver.receive(buffer); !s.ok()) std::fprintf(stderr, "%s\n", s.status().message().c_str()), ok = false;
          end[k * size + r] = Clock::now();
        }
        if (values[params - 1] != static_cast<float>((params - 1) % 1000) * 0.001f) ok = false;
      }
    });
  }
  for (auto& th : threads) th.join();
  Timing t;
  t.ok = ok;
  double total = 0;
  for (int k = 1; k <= o.syncs; ++k) {
    Clock::time_point last = end[k * size];
    for (int r = 1; r < size; ++r) last = std::max(last, end[k * size + r]);
    const double s = std::chrono::duration<double>(last - start[k]).count();
    total += s;
    t.min_s = std::min(t.min_s, s);
  }
  t.mean_s = total / o.syncs;
  return t;
}

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(static_cast<int64_t>(std::stod(item)));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--receivers") o.receivers = std::stoi(value);
    else if (flag == "--syncs") o.syncs = std::stoi(value);
    else if (flag == "--bucket-mb") o.bucket_mb = std::stoll(value);
    else if (flag == "--params") o.params = parse_list(value);
    else return std::fprintf(stderr, "unknown flag %s; see the comment at the top of weight_sync_bench.cc\n", argv[i]), 2;
  }
  log::set_min_level(log::Level::kWarn);  // not the groups' info lines between the figures
  const RunKeys keys = std::move(generate_run_keys()).value();
  std::printf("weight sync over loopback: %d receiver(s), %lld MiB buckets, %d timed syncs, %u hardware threads\n",
              o.receivers, static_cast<long long>(o.bucket_mb), o.syncs, std::thread::hardware_concurrency());
  std::printf("%12s %10s  %-6s %10s %10s %10s\n", "params", "MB", "via", "s/sync", "min s", "MB/s");
  int group = 0;
  std::string folder = (std::filesystem::temp_directory_path() / "rlrun-bench-keysXXXXXX").string();
  if (::mkdtemp(folder.data()) == nullptr) return std::perror("mkdtemp"), 1;  // mode 0700, like <run_dir>/keys
  SecurityOptions same_host = client_security(keys);
  same_host.private_dir = folder;
  const std::pair<const char*, SecurityOptions> transports[] = {
      {"gloo", SecurityOptions{}}, {"curve", client_security(keys)}, {"local", same_host}};
  for (const int64_t params : o.params) {
    const double mb = static_cast<double>(params) * 4 / 1e6;
    Timing by[3];
    for (int t = 0; t < 3; ++t) {
      by[t] = measure(o, params, transports[t].second, str("b", group++));
      std::printf("%12lld %10.1f  %-6s %10.4f %10.4f %10.0f%s\n", static_cast<long long>(params), mb,
                  transports[t].first, by[t].mean_s, by[t].min_s, mb / by[t].mean_s,
                  by[t].ok ? "" : "  (FAILED: see above)");
    }
    std::printf("%12s %10s  curve/gloo time ratio %.2fx, local/curve %.2fx\n", "", "", by[1].mean_s / by[0].mean_s,
                by[2].mean_s / by[1].mean_s);
  }
  std::filesystem::remove_all(folder);
  return 0;
}
