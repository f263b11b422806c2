// checkpoint_files.h - streamed file writes and reads with running checksums, for trainer
// checkpoints (whole small files go through common/atomic_file.h).
// POSIX I/O: every file is fsync'd before it counts as written; directories are fsync'd after
// entries change in them. Errors name the path and the errno text.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace rlrun::trainer {

// FNV-1a 64 over a byte stream, updated incrementally.
struct Fnv1a64 {
  uint64_t value = 1469598103934665603ull;
  void update(const void* data, size_t bytes);
};

// Streams bytes to a new file (truncating), checksumming them; finish() fsyncs and closes.
class FileWriter {
 public:
  FileWriter() = default;
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  Status open(const std::string& path);
  Status write(const void* data, size_t bytes);
  Status finish();
  uint64_t checksum() const { return sum_.value; }
  int64_t bytes() const { return bytes_; }

 private:
  std::string path_;
  int fd_ = -1;
  Fnv1a64 sum_;
  int64_t bytes_ = 0;
};

// Reads a file sequentially, checksumming what was read.
class FileReader {
 public:
  FileReader() = default;
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  Status open(const std::string& path);
  int64_t size() const { return size_; }
  Status read(void* data, size_t bytes);  // exactly `bytes`, or io_error (file shorter)
  uint64_t checksum() const { return sum_.value; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
  Fnv1a64 sum_;
};

Result<std::string> read_text_file(const std::string& path, int64_t max_bytes);
Status fsync_directory(const std::string& path);

}  // namespace rlrun::trainer
