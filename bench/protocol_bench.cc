// protocol_bench - encode/decode cost per message kind, and control-plane round trips over
// loopback TCP. Prints figures; never fails on time.
//
// The bound printed beside each decode is a memcpy of the message's bytes, measured in the same
// run: decode should cost about the header, not the arrays (they are not copied).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

#include "common/protocol/control_plane.h"
#include "common/protocol/protocol.h"

using namespace rlrun;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_per(int iterations, const std::function<void()>& body) {
  const auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) body();
  return std::chrono::duration<double>(Clock::now() - start).count() / iterations;
}

size_t frame_bytes(const Frames& frames) {
  size_t n = 0;
  for (const auto& f : frames) n += f.size();
  return n;
}

template <class T>
void bench_codec(const char* name, const T& message, int iterations) {
  const Frames sample = encode(message);
  const size_t bytes = frame_bytes(sample);
  const double encode_s = seconds_per(iterations, [&] { Frames f = encode(message); });
  // decode consumes its frames: time encode+decode, subtract encode.
  const double both_s = seconds_per(iterations, [&] {
    auto m = decode(encode(message));
    if (!m.ok()) std::abort();
  });
  std::vector<char> src(bytes), dst(bytes);
  const double memcpy_s = seconds_per(iterations, [&] { std::memcpy(dst.data(), src.data(), bytes); });
  std::printf("%-16s %10zu bytes  encode %8.2f us  decode %8.2f us  (memcpy of the bytes %8.2f us)\n", name, bytes,
              encode_s * 1e6, (both_s - encode_s) * 1e6, memcpy_s * 1e6);
}

void bench_round_trips() {
  auto server = std::move(ControlServer::bind({})).value();
  ControlClient::Options options;
  options.endpoint = server->endpoint();
  options.identity = "bench";
  auto client = std::move(ControlClient::connect(options)).value();
  std::thread echo([&] {
    for (int handled = 0; handled < 10000 + 2000;) {
      auto in = server->poll(std::chrono::milliseconds(2000));
      if (!in.ok()) break;
      (void)server->send(in->peer, in->message);
      ++handled;
    }
  });
  const double request_s = seconds_per(10000, [&] {
    if (!client->request(Heartbeat{1}, std::chrono::milliseconds(2000)).ok()) std::abort();
  });
  GenerateResult result;
  result.token_ids = std::vector<int32_t>(1024, 5);
  result.logprobs = std::vector<float>(1024, -1.0f);
  const auto start = Clock::now();
  for (int i = 0; i < 2000; ++i) (void)client->send(result);
  for (int i = 0; i < 2000; ++i) {
    if (!client->receive(std::chrono::milliseconds(2000)).ok()) std::abort();
  }
  const double stream_s = std::chrono::duration<double>(Clock::now() - start).count();
  echo.join();
  std::printf("loopback request/reply (Heartbeat):       %8.1f us per round trip\n", request_s * 1e6);
  std::printf("loopback echo stream (1024-token result): %8.0f messages/s each way\n", 2000 / stream_s);
}

}  // namespace

int main() {
  GenerateResult result;
  result.token_ids = std::vector<int32_t>(1024, 7);
  result.logprobs = std::vector<float>(1024, -0.5f);
  bench_codec("GenerateResult", result, 20000);

  TrainBatch batch;
  batch.num_rows = 4;
  batch.row_len = 8192;
  batch.num_micro_batches = 4;
  batch.micro_batch_row_offsets = {0, 1, 2, 3, 4};
  const size_t n = size_t{batch.num_rows} * batch.row_len;
  batch.input_ids = std::vector<int32_t>(n, 1);
  batch.position_ids = std::vector<int32_t>(n, 0);
  batch.cu_seqlens = std::vector<int32_t>{0, 8192, 16384, 24576, 32768};
  batch.loss_mask = std::vector<uint8_t>(n, 1);
  batch.advantages = std::vector<float>(n, 0.1f);
  batch.rollout_logprobs = std::vector<float>(n, -1.0f);
  bench_codec("TrainBatch", batch, 2000);

  WeightBucket bucket{1, 0, 0, DType::kBF16, std::vector<uint8_t>(64u << 20, 1)};
  bench_codec("WeightBucket", bucket, 50);

  bench_round_trips();
  return 0;
}
