// bench_dataset - a JSONL dataset of millions of rows: how long the jsonl task takes to check and
// index it, what it costs the orchestrator in memory, and how fast rows are drawn.
//
//   build/bench/bench_dataset [ROWS]      (default 2000000; writes a temporary file of ~200 MB)
//
// The bound: the file's own size. Memory growth / file size shows the task keeps an index, not the
// rows (a task that loaded every row would grow by more than the file); the rollout workers never
// read the dataset. Prints figures, never fails on time.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/clock.h"
#include "common/observe/log.h"
#include "common/observe/memory.h"
#include "orchestrator/tasks/tasks.h"

using namespace rlrun;
using namespace rlrun::orchestrator;

namespace {

int64_t peak_resident_bytes() {
  Result<ProcessMemory> m = read_process_memory();
  return m.ok() ? m->peak_resident_bytes : 0;  // the peak: what indexing needed at most
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 2000000;
  const std::string path = (std::filesystem::temp_directory_path() / ("bench_dataset_" + std::to_string(::getpid()) + ".jsonl")).string();
  {
    std::ofstream out(path);
    for (int64_t i = 0; i < rows; ++i) {
      out << "{\"question\": \"Natalia sold clips to " << i % 997 << " of her friends in April, and then she sold half as many "
          << "clips in May. How many clips did Natalia sell altogether in April and May? (row " << i
          << ")\", \"answer\": \"" << i % 997 + i % 997 / 2 << "\", \"source\": \"synthetic\", \"id\": " << i << "}\n";
    }
  }
  const double file_mb = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
  TaskSpec spec;
  spec.name = "jsonl";
  spec.dataset = path;
  spec.prompt_field = "question";
  spec.eval_size = 64;
  const int64_t before = peak_resident_bytes();
  const auto start = std::chrono::steady_clock::now();
  Result<std::unique_ptr<Task>> task = make_task(spec);
  const double index_s = seconds_since(start);
  if (!task.ok()) {
    std::fprintf(stderr, "bench_dataset: %s\n", task.status().message().c_str());
    std::filesystem::remove(path);
    return 1;
  }
  const double grown_mb = static_cast<double>(peak_resident_bytes() - before) / 1e6;
  const int draws = 100000;
  const auto draw_start = std::chrono::steady_clock::now();
  size_t chars = 0;
  for (int i = 0; i < draws; ++i) chars += (*task)->next_train().prompt.size();
  const double draw_s = seconds_since(draw_start);
  std::printf("rows %lld, file %.0f MB\n", static_cast<long long>(rows), file_mb);
  std::printf("check + index: %.2f s (%.2f M rows/s)\n", index_s, static_cast<double>(rows) / index_s / 1e6);
  std::printf("orchestrator peak memory growth: %.1f MB = %.3f x the file (%.1f bytes a row)\n", grown_mb, grown_mb / file_mb,
              grown_mb * 1e6 / static_cast<double>(rows));
  std::printf("draw: %.1f us a row (%d rows in shuffled order, %zu prompt bytes)\n", draw_s / draws * 1e6, draws, chars);
  std::filesystem::remove(path);
  return 0;
}
