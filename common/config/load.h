// config/load.h - internal to the config loader (config/load.cc, config/checkpoint_shape.cc,
// config/rules.cc): the state of one load_config() call. Other code uses common/config/config.h.
#pragma once

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"

namespace rlrun {

struct ConfigLoad {
  Config config;
  // Where each non-default value came from, by dotted key: "run.yaml:12",
  // "--set seed=3", "model.checkpoint config.json". Absent = the built-in default.
  std::map<std::string, std::string> origins;
  // Keys whose given value was rejected: the config still holds the previous layer's value, so
  // cross-field rules about them would describe a value the user did not write and are skipped.
  std::set<std::string> rejected;
  std::vector<std::string> errors;  // "where: message", in the order found
  // The folder relative paths of the layer being applied are resolved against (KeySpec path keys):
  // the config file's folder for the file, the working directory for --set.
  std::filesystem::path path_base;

  void error(std::string_view where, std::string_view message);
  // The origin of `dotted_key`, or "" for a default.
  std::string origin(const std::string& dotted_key) const;
};

// model.checkpoint: forbids explicit shape keys, reads the checkpoint's config.json into
// config.model and defaults model.tokenizer to the checkpoint's tokenizer.json.
void resolve_model_checkpoint(ConfigLoad& load);

// Cross-field rules (each message names every key involved) and paths that must exist.
void check_config_rules(ConfigLoad& load);

}  // namespace rlrun
