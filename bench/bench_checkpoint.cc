// bench_checkpoint - what checkpoint checksums cost (trainer/checkpoint_files.h):
//   * XXH3-64 over a buffer in memory, against memcpy of the same bytes (the memory bound);
//   * a checkpoint-sized file written through FileWriter (checksummed, fsync'd), and verified
//     (verify_file: read back and checksummed), against a plain read of the same file. The read
//     is mostly from the page cache right after the write: it shows the checksum's share, not
//     the disk's speed.
// Prints seconds per GB; never fails on time.
//
// Usage: bench_checkpoint [--gib N (default 1)] [--dir DIR (default /tmp)]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/clock.h"
#include "trainer/checkpoint_files.h"

using namespace rlrun;
using namespace rlrun::trainer;

namespace {

using Clock = std::chrono::steady_clock;

void print(const char* what, double seconds, double bytes) {
  std::printf("  %-44s %7.3f s/GB  (%6.2f GB/s)\n", what, seconds / (bytes / 1e9), bytes / 1e9 / seconds);
}

void die(const Status& s) {
  if (s.ok()) return;
  std::fprintf(stderr, "bench_checkpoint: %s\n", s.message().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1;
  std::string dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--gib") == 0) gib = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
  }
  constexpr size_t kChunk = size_t{16} << 20;  // as the trainer streams (kCheckpointChunkElements f32)
  std::vector<char> chunk(kChunk), copy(kChunk);
  for (size_t i = 0; i < kChunk; ++i) chunk[i] = static_cast<char>(i * 2654435761u >> 13);
  const size_t chunks = static_cast<size_t>(gib * (1 << 30) / kChunk);
  const double bytes = static_cast<double>(chunks * kChunk);
  std::printf("bench_checkpoint: %.2f GiB in %zu chunks of 16 MiB\n", bytes / (1 << 30), chunks);

  auto t = Clock::now();
  for (size_t c = 0; c < chunks; ++c) std::memcpy(copy.data(), chunk.data(), kChunk);
  print("memcpy (the in-memory bound)", seconds_since(t), bytes);
  t = Clock::now();
  Checksum sum;
  for (size_t c = 0; c < chunks; ++c) sum.update(chunk.data(), kChunk);
  print("XXH3-64 in memory", seconds_since(t), bytes);

  const std::string name = "bench_checkpoint_" + std::to_string(::getpid()) + ".f32";
  const std::string path = dir + "/" + name;
  t = Clock::now();
  FileWriter writer;
  die(writer.open(path));
  for (size_t c = 0; c < chunks; ++c) die(writer.write(chunk.data(), kChunk));
  die(writer.finish());
  print("write + XXH3 + fsync (FileWriter)", seconds_since(t), bytes);

  t = Clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY);
  for (ssize_t n = 1; n > 0;) n = ::read(fd, copy.data(), kChunk);
  ::close(fd);
  const double plain = seconds_since(t);
  print("plain read (page cache)", plain, bytes);
  t = Clock::now();
  die(verify_file(dir, FileDigest{name, writer.bytes(), writer.checksum()}));
  const double verified = seconds_since(t);
  print("read + XXH3 + compare (verify_file)", verified, bytes);
  std::printf("  checksum share of a verified read: %.0f%%\n", 100 * (verified - plain) / verified);
  std::filesystem::remove(path);
  return 0;
}
