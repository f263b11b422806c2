#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/file_io.h"
#include "common/observe/log.h"

namespace rlrun {
namespace {

std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(str("writing ", path, ": ", describe_file_error(errno)));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status();
}

Status write_and_sync(int fd, std::span<const std::string_view> pieces, const std::string& path) {
  for (std::string_view piece : pieces) RLRUN_RETURN_IF_ERROR(write_all(fd, piece, path));
  if (::fsync(fd) != 0) return io_error(str("fsync ", path, ": ", describe_file_error(errno)));
  return Status();
}

}  // namespace

Status write_file_atomic(const std::string& path, std::span<const std::string_view> pieces, mode_t mode) {
  const std::string dir = parent_dir(path);
  // mkstemp gives a unique name, so concurrent writers of the same target never share a temp file.
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    const int err = errno;
    return io_error(str("cannot create a temporary file beside ", path, ": ", describe_file_error(err),
                        err == ENOENT ? " (does the folder exist?)" : ""));
  }
  Status status = write_and_sync(fd, pieces, tmp);
  if (::fchmod(fd, mode) != 0 && status.ok()) {
    status = io_error(str("chmod ", tmp, ": ", std::strerror(errno)));
  }
  if (::close(fd) != 0 && status.ok()) status = io_error(str("closing ", tmp, ": ", describe_file_error(errno)));
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = io_error(str("renaming ", tmp, " to ", path, ": ", describe_file_error(errno)));
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {  // durability of the rename; failure to sync the directory is not fatal
    if (::fsync(dir_fd) != 0) log::warn(str("fsync of directory ", dir, " failed: ", std::strerror(errno)));
    ::close(dir_fd);
  }
  return Status();
}

}  // namespace rlrun
