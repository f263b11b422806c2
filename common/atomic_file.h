// atomic_file.h - replace a file so that a crash leaves either the old or the new content.
//
// The content is written to a temporary file in the same directory, fsync'ed, renamed over the
// target, and the directory is fsync'ed so the rename itself is durable. Checkpoints and other
// files a restart depends on are written through this.
#pragma once

#include <sys/types.h>

#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rlrun {

// Writes the concatenation of `pieces` to `path` atomically. On error the target is untouched and
// the temporary file is removed; the message names `path`. The file gets `mode` (0600 for
// secrets: the temporary file is created 0600, so the content is never readable by others).
Status write_file_atomic(const std::string& path, std::span<const std::string_view> pieces, mode_t mode = 0644);

inline Status write_file_atomic(const std::string& path, std::string_view content, mode_t mode = 0644) {
  return write_file_atomic(path, std::span<const std::string_view>(&content, 1), mode);
}

}  // namespace rlrun
