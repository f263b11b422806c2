#include "trainer/checkpoint_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/observe/log.h"

namespace rlrun::trainer {

namespace {
Status errno_error(const std::string& what, const std::string& path) {
  return io_error(str(what, " ", path, ": ", std::strerror(errno)));
}
}  // namespace

void Fnv1a64::update(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    value ^= p[i];
    value *= 1099511628211ull;
  }
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status FileWriter::open(const std::string& path) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return errno_error("cannot create", path);
  return Status();
}

Status FileWriter::write(const void* data, size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  sum_.update(data, bytes);
  bytes_ += static_cast<int64_t>(bytes);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return errno_error("cannot write", path_);
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status();
}

Status FileWriter::finish() {
  if (::fsync(fd_) != 0) return errno_error("cannot fsync", path_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return errno_error("cannot close", path_);
  return Status();
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status FileReader::open(const std::string& path) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return errno_error("cannot open", path);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return errno_error("cannot stat", path);
  size_ = static_cast<int64_t>(st.st_size);
  return Status();
}

Status FileReader::read(void* data, size_t bytes) {
  auto* p = static_cast<char*>(data);
  size_t left = bytes;
  while (left > 0) {
    const ssize_t n = ::read(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("cannot read", path_);
    if (n == 0) return io_error(str(path_, " is shorter than expected (truncated checkpoint?)"));
    p += n;
    left -= static_cast<size_t>(n);
  }
  sum_.update(data, bytes);
  return Status();
}

Result<std::string> read_text_file(const std::string& path, int64_t max_bytes) {
  FileReader r;
  RLRUN_RETURN_IF_ERROR(r.open(path));
  if (r.size() > max_bytes) return io_error(str(path, " is ", r.size(), " bytes, more than the limit of ", max_bytes));
  std::string text(static_cast<size_t>(r.size()), '\0');
  RLRUN_RETURN_IF_ERROR(r.read(text.data(), text.size()));
  return text;
}

Status fsync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_error("cannot open directory", path);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return errno_error("cannot fsync directory", path);
  return Status();
}

}  // namespace rlrun::trainer
