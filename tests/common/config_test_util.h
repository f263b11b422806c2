// Helpers for config tests: temporary files and error-message assertions.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/config/config.h"

namespace rlrun::testing {

// A fresh folder under the temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "rlrun_config_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

  // Writes `text` to `name` inside the folder (creating subfolders) and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path p = std::filesystem::path(path_) / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

 private:
  std::string path_;
};

// A stand-in for the engine's checkpoint reader (engine/io/model_io.h checkpoint_config_json,
// tested with the real reader in tests/engine/io and tests/orchestrator): a folder's config.json
// text as it is; a file is "not a model file". Registered for the lifetime of the object.
class PassThroughCheckpointReader {
 public:
  PassThroughCheckpointReader() { set_checkpoint_reader(&read); }
  ~PassThroughCheckpointReader() { set_checkpoint_reader(nullptr); }
  static Result<std::string> read(const std::string& checkpoint) {
    std::ifstream in(std::filesystem::path(checkpoint) / "config.json");
    if (!in) return invalid_argument(checkpoint + ": not a model file");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

// The error lines of a failed load (fails the test when the load succeeded).
inline std::vector<std::string> error_lines(const Result<Config>& result) {
  std::vector<std::string> lines;
  EXPECT_FALSE(result.ok()) << "expected the config to be rejected";
  if (result.ok()) return lines;
  std::string line;
  for (char c : result.status().message() + "\n") {
    if (c == '\n') {
      if (!line.empty()) lines.push_back(line);
      line.clear();
    } else {
      line += c;
    }
  }
  return lines;
}

inline Result<Config> load_text(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  return load_config_text(yaml, "run.yaml", sets);
}

}  // namespace rlrun::testing
