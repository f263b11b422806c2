#include "orchestrator/run/samples/dispatch_count.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <filesystem>

#include "common/file_io.h"
#include "common/observe/log.h"

namespace rlrun::orchestrator {

namespace {
constexpr int kDigits = 20;  // every int64_t; the line is always kDigits + 1 bytes
}  // namespace

std::string dispatch_count_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "dispatched_samples").string();
}

DispatchCount::~DispatchCount() {
  if (fd_ >= 0) ::close(fd_);
}

Status DispatchCount::open(const std::string& path, int64_t total) {
  if (fd_ >= 0) ::close(fd_);
  path_ = path;
  total_ = total;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return io_error(str("cannot create ", path, ": ", describe_file_error(errno)));
  return write();
}

Status DispatchCount::write() {
  char line[kDigits + 2];
  std::snprintf(line, sizeof(line), "%0*" PRId64 "\n", kDigits, total_);
  const ssize_t n = ::pwrite(fd_, line, kDigits + 1, 0);
  if (n == kDigits + 1) return Status();
  return io_error(str("cannot write ", path_, ": ", n < 0 ? describe_file_error(errno) : "short write"));
}

void DispatchCount::add(int64_t n) {
  total_ += n;
  if (fd_ < 0) return;
  if (Status s = write(); !s.ok()) {
    log::warn(str(s.message(), "; the run goes on, but if this orchestrator is killed, a resumed run cannot count "
                  "the samples it dispatched after its last checkpoint"));
    ::close(fd_);
    fd_ = -1;
  }
}

Result<std::optional<int64_t>> DispatchCount::read(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<int64_t>();
  RLRUN_ASSIGN_OR_RETURN(const std::string text, read_file(path, "dispatched-sample count"));
  bool digits = text.size() == kDigits + 1 && text.back() == '\n' && text[0] == '0';  // 19 digits hold any count
  for (int i = 0; digits && i < kDigits; ++i) digits = text[i] >= '0' && text[i] <= '9';
  if (!digits) return invalid_argument(str(path, " is not a count of dispatched samples (torn by a machine crash?)"));
  return std::optional<int64_t>(std::strtoll(text.c_str(), nullptr, 10));
}

}  // namespace rlrun::orchestrator
