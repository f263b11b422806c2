// file_io.h - a whole file into memory, and the system's reason for a failed file operation, in
// words that say what to do. (Writing a file that must survive a crash: atomic_file.h.)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rlrun {

// The bytes of `path`. Errors name `what` ("tokenizer file", "HF config.json", ...) and the path:
// kNotFound when it does not exist, kInvalidArgument for a folder, kIOError for any other failure
// (with the system's reason).
Result<std::string> read_file(const std::string& path, std::string_view what);

// strerror(err), followed for the failures a user can fix by what to do, e.g. "No space left on
// device (the file system is full: free space on it)". For messages that already name the path.
std::string describe_file_error(int err);

// Keeps an append-only file (metrics.jsonl, a log) bounded: when `path` holds `max_bytes` or more
// (0: never), it is renamed `<path>.1`, replacing an older one, and the next append starts a new
// file; at most about 2 x max_bytes stay on disk. Returns whether it rotated; a failed rename is
// an error naming both paths (the file then goes on growing).
Result<bool> rotate_if_larger(const std::string& path, int64_t max_bytes);

}  // namespace rlrun
