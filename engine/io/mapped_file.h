// mapped_file.h - the bytes of a model file: mmap'ed read-only, or owned in memory (tests).
//
// Shared by the parsers of untrusted files (safetensors.h, gguf.h): they hold a
// shared_ptr<const MappedFile> so that views into the bytes live as long as any holder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace rlrun::engine {

class MappedFile {
 public:
  // Maps `path` read-only. Errors name `what` ("safetensors file", ...) and the path: kNotFound
  // when it cannot be opened, kIOError when it is not a regular file or cannot be mapped.
  static Result<std::shared_ptr<const MappedFile>> open(const std::string& path, const std::string& what);
  // Owns `bytes` (an in-memory file).
  static std::shared_ptr<const MappedFile> from_bytes(std::vector<uint8_t> bytes);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::vector<uint8_t> owned_;
  void* mapping_ = nullptr;  // munmap'ed on destruction
};

}  // namespace rlrun::engine
