#include "common/file_io.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/observe/log.h"

namespace rlrun {

Result<std::string> read_file(const std::string& path, std::string_view what) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int err = errno;
    if (err == ENOENT) return not_found(str("cannot read ", what, " ", path, ": it does not exist"));
    return io_error(str("cannot read ", what, " ", path, ": ", std::strerror(err)));
  }
  if (S_ISDIR(info.st_mode)) return invalid_argument(str(what, " ", path, " is a folder, not a file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(str("cannot open ", what, " ", path, ": ", std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad() || text.bad()) return io_error(str("cannot read ", what, " ", path, ": read failed"));
  return text.str();
}

std::string describe_file_error(int err) {
  const char* what_to_do = nullptr;
  switch (err) {
    case ENOSPC:
    case EDQUOT: what_to_do = "the file system is full or over quota: free space on it"; break;
    case EFBIG: what_to_do = "larger than this process may write: raise the file size limit (ulimit -f)"; break;
    case EACCES:
    case EPERM: what_to_do = "no permission: make the folder writable by this user"; break;
    case EROFS: what_to_do = "the file system is mounted read-only"; break;
    case EIO: what_to_do = "the device reported an I/O error: check the disk"; break;
    default: break;
  }
  std::string text = std::strerror(err);
  if (what_to_do != nullptr) text += str(" (", what_to_do, ")");
  return text;
}

Result<bool> rotate_if_larger(const std::string& path, int64_t max_bytes) {
  struct stat info {};
  if (max_bytes <= 0 || ::stat(path.c_str(), &info) != 0 || info.st_size < max_bytes) return false;
  const std::string older = path + ".1";
  if (::rename(path.c_str(), older.c_str()) != 0)
    return io_error(str("cannot rename ", path, " to ", older, ": ", describe_file_error(errno)));
  return true;
}

}  // namespace rlrun
