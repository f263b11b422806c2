#include "common/file_io.h"

#include <sys/stat.h>

#include <cerrno>
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

}  // namespace rlrun
