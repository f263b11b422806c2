// file_io.h - a whole file into memory, with an error that names it and says why.
// (Writing a file that must survive a crash: atomic_file.h.)
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace rlrun {

// The bytes of `path`. Errors name `what` ("tokenizer file", "HF config.json", ...) and the path:
// kNotFound when it does not exist, kInvalidArgument for a folder, kIOError for any other failure
// (with the system's reason).
Result<std::string> read_file(const std::string& path, std::string_view what);

}  // namespace rlrun
