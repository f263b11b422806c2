#include "trainer/checkpoint_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/check.h"
#include "common/file_io.h"
#include "common/observe/log.h"

namespace rlrun::trainer {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kManifestFormat = 2;
constexpr const char* kManifest = "COMPLETE";
constexpr int64_t kMaxManifestBytes = int64_t{64} << 20;
constexpr size_t kVerifyChunkBytes = size_t{16} << 20;

Status errno_error(const std::string& what, const std::string& path) {
  return io_error(str(what, " ", path, ": ", describe_file_error(errno)));
}

// A manifest path names a file inside the folder: relative, no "..", no empty parts.
bool safe_relative_path(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.back() == '/') return false;
  for (size_t begin = 0; begin <= path.size();) {
    const size_t end = std::min(path.find('/', begin), path.size());
    const std::string part = path.substr(begin, end - begin);
    if (part.empty() || part == "." || part == "..") return false;
    begin = end + 1;
  }
  return true;
}

}  // namespace

Checksum::Checksum() : state_(XXH3_createState()) {
  RLRUN_CHECK(state_ != nullptr, "XXH3_createState: out of memory");
  XXH3_64bits_reset(state_);
}

Checksum::~Checksum() { XXH3_freeState(state_); }

void Checksum::update(const void* data, size_t bytes) { XXH3_64bits_update(state_, data, bytes); }

uint64_t Checksum::value() const { return XXH3_64bits_digest(state_); }

std::string checksum_hex(uint64_t value) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016" PRIx64, value);
  return hex;
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
    if (n < 0) return errno_error("cannot write", path_);
    if (n == 0) return io_error(str("cannot write ", path_, ": the system wrote nothing"));
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
  if (!S_ISREG(st.st_mode)) return invalid_argument(str(path, " is not a regular file"));
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

// ---- the manifest

namespace {

// Reads a just-opened file through, so that r.checksum() covers all of it.
Status read_through(FileReader& r) {
  std::vector<char> chunk(static_cast<size_t>(std::min<int64_t>(r.size(), kVerifyChunkBytes)));
  for (int64_t done = 0; done < r.size();) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(r.size() - done, static_cast<int64_t>(chunk.size())));
    RLRUN_RETURN_IF_ERROR(r.read(chunk.data(), n));
    done += static_cast<int64_t>(n);
  }
  return Status();
}

}  // namespace

Result<FileDigest> digest_file(const std::string& dir, const std::string& relative) {
  FileReader r;
  RLRUN_RETURN_IF_ERROR(r.open(dir + "/" + relative));
  RLRUN_RETURN_IF_ERROR(read_through(r));
  return FileDigest{relative, r.size(), r.checksum()};
}

Result<std::vector<FileDigest>> digest_tree(const std::string& dir, const std::string& sub) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(fs::path(dir) / sub, ec); !ec && it != fs::end(it); it.increment(ec)) {
    if (it->is_regular_file(ec)) paths.push_back(fs::relative(it->path(), dir, ec).generic_string());
  }
  if (ec) return io_error(str("cannot list ", dir, "/", sub, ": ", ec.message()));
  std::sort(paths.begin(), paths.end());
  std::vector<FileDigest> out;
  for (const std::string& p : paths) {
    RLRUN_ASSIGN_OR_RETURN(FileDigest d, digest_file(dir, p));
    out.push_back(std::move(d));
  }
  return out;
}

Status write_manifest(const std::string& dir, const std::vector<FileDigest>& files) {
  json list = json::array();
  for (const FileDigest& f : files) list.push_back({{"path", f.path}, {"bytes", f.bytes}, {"xxh3_64", checksum_hex(f.xxh3)}});
  const json manifest = {{"format", kManifestFormat}, {"files", std::move(list)}};
  return write_file_atomic(dir + "/" + kManifest, manifest.dump(1) + "\n");
}

Result<std::vector<FileDigest>> read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifest;
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found(str("checkpoint ", dir, " has no COMPLETE manifest (torn or not a checkpoint)"));
  RLRUN_ASSIGN_OR_RETURN(const std::string text, read_text_file(path, kMaxManifestBytes));
  const json m = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto bad = [&](const std::string& why) {
    return invalid_argument(str(path, ": ", why, " (a corrupt manifest, or a checkpoint of an older rlrun "
                                "without one): this checkpoint cannot be verified and is not used"));
  };
  if (m.is_discarded() || !m.is_object()) return bad("not a JSON manifest");
  std::vector<FileDigest> files;
  try {
    if (m.at("format").get<int>() != kManifestFormat) return bad(str("manifest format ", m.at("format").dump()));
    for (const json& f : m.at("files")) {
      FileDigest d{f.at("path").get<std::string>(), f.at("bytes").get<int64_t>(), 0};
      const std::string hex = f.at("xxh3_64").get<std::string>();
      char* end = nullptr;
      d.xxh3 = std::strtoull(hex.c_str(), &end, 16);
      if (hex.size() != 16 || end != hex.c_str() + 16) return bad(str("checksum \"", hex, "\" is not 16 hex digits"));
      if (!safe_relative_path(d.path) || d.bytes < 0) return bad(str("bad entry ", f.dump()));
      files.push_back(std::move(d));
    }
  } catch (const json::exception& e) {
    return bad(str("missing or mistyped field (", e.what(), ")"));
  }
  return files;
}

Status verify_file(const std::string& dir, const FileDigest& digest) {
  const std::string path = dir + "/" + digest.path;
  FileReader r;
  RLRUN_RETURN_IF_ERROR(r.open(path));
  if (r.size() != digest.bytes)
    return invalid_argument(str(path, " is ", r.size(), " bytes, the manifest says ", digest.bytes, " (truncated?)"));
  RLRUN_RETURN_IF_ERROR(read_through(r));
  if (r.checksum() != digest.xxh3)
    return invalid_argument(str(path, ": checksum mismatch (the file is corrupt): xxh3_64 ", checksum_hex(r.checksum()),
                                ", the manifest says ", checksum_hex(digest.xxh3)));
  return Status();
}

}  // namespace rlrun::trainer
