// checkpoint_files.h - a checkpoint's files: streamed writes and reads with running checksums, and
// the manifest that lists every file of a checkpoint with its size and checksum.
//
// POSIX I/O: every file is fsync'd before it counts as written; directories are fsync'd after
// entries change in them. Errors name the path and say what to do (common/file_io.h).
//
// The manifest is the checkpoint folder's COMPLETE file, written last and atomically (JSON):
//   {"format": 2, "files": [{"path": "params.f32", "bytes": 1234, "xxh3_64": "16 hex digits"}, ...]}
// with every other file of the folder (paths relative to it, '/'-separated, sub-folders
// included). A folder whose COMPLETE is missing, unparsable or does not match its files is not a
// usable checkpoint. Checksums are XXH3-64 (libxxhash): about 8 GB/s on one core, and
// `xxhsum -H3 FILE` prints the same 16 hex digits, so a checkpoint can be checked by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

struct XXH3_state_s;

namespace rlrun::trainer {

// XXH3-64 over a byte stream, updated incrementally.
class Checksum {
 public:
  Checksum();
  ~Checksum();
  Checksum(const Checksum&) = delete;
  Checksum& operator=(const Checksum&) = delete;

  void update(const void* data, size_t bytes);
  uint64_t value() const;  // of everything so far; update() may go on

 private:
  XXH3_state_s* state_;  // owned
};

// 16 lowercase hex digits, most significant first (xxhsum's form).
std::string checksum_hex(uint64_t value);

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
  uint64_t checksum() const { return sum_.value(); }
  int64_t bytes() const { return bytes_; }

 private:
  std::string path_;
  int fd_ = -1;
  Checksum sum_;
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
  uint64_t checksum() const { return sum_.value(); }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
  Checksum sum_;
};

Result<std::string> read_text_file(const std::string& path, int64_t max_bytes);
Status fsync_directory(const std::string& path);

// ---- the manifest (COMPLETE)

struct FileDigest {
  std::string path;  // relative to the checkpoint folder
  int64_t bytes = 0;
  uint64_t xxh3 = 0;
};

// The digest of <dir>/<relative>, reading it through once.
Result<FileDigest> digest_file(const std::string& dir, const std::string& relative);

// The digests of every regular file under <dir>/<sub> (recursively), paths relative to dir.
Result<std::vector<FileDigest>> digest_tree(const std::string& dir, const std::string& sub);

// Writes <dir>/COMPLETE (atomically, fsync'd): the manifest of `files`.
Status write_manifest(const std::string& dir, const std::vector<FileDigest>& files);

// The manifest of `dir`: kNotFound without COMPLETE (torn or not a checkpoint), kInvalidArgument
// when it is not a manifest this rlrun writes (corrupt, or a checkpoint of an older rlrun).
Result<std::vector<FileDigest>> read_manifest(const std::string& dir);

// Checks one file against its digest: size first, then every byte. Errors name the file.
Status verify_file(const std::string& dir, const FileDigest& digest);

}  // namespace rlrun::trainer
