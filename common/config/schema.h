// config/schema.h - the table of configuration keys, expanded from common/config/keys.def.
//
// Each KeySpec knows its section, name, type, allowed values, comment, and how to read and write
// its member of a Config. The loader, the validator, the renderer and the defaults.yaml test all
// walk this one table; none of them names a key by hand except the cross-field rules.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "common/config/config.h"
#include "common/status.h"

namespace rlrun {

enum class ConfigSection { kTop, kModel, kTask };

// "" for kTop, "model", "task".
std::string_view section_name(ConfigSection section);

enum class ValueType { kInt, kFloat, kBool, kString, kEnum };

// A key's value: int64_t (kInt), double (kFloat), bool (kBool), std::string (kString, and kEnum
// as its YAML spelling).
using ConfigValue = std::variant<int64_t, double, bool, std::string>;

// Allowed numeric range; infinite ends are unbounded. For a string key, `path` marks a file or
// folder path: the loader makes it absolute, relative to the config file that wrote it (a `--set`
// value or a default: relative to the working directory), so the effective config written into a
// run folder means the same wherever it is read.
struct Bounds {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;
  bool path = false;
  std::string_view words = {};  // a path key's values that are words, not paths: "auto|none"

  bool contains(double x) const;
  // A path key's value that is to be resolved as a path (not empty, not one of `words`).
  bool is_path_value(std::string_view value) const;
  // "[1, 4096]", "(0, 1]", ">= 0", "> 0", "any"
  std::string describe() const;
};

struct KeySpec {
  ConfigSection section;
  std::string_view name;     // as written inside its section: "hidden_size"
  ValueType type;
  std::string_view choices;  // kEnum: "grpo|dr_grpo|rloo|gspo"
  Bounds bounds;             // kInt, kFloat
  std::string_view comment;  // one line
  std::string_view group;    // heading it is listed under
  ConfigValue (*get)(const Config& config);
  void (*set)(Config& config, const ConfigValue& value);  // value must already be valid

  std::string dotted_name() const;  // "model.hidden_size", "seq_len"
};

// True for the `model:` keys that model.checkpoint's config.json gives (hidden_size, ...).
bool is_checkpoint_shape_key(std::string_view model_key);

// Every key, in config/keys.def order.
std::span<const KeySpec> config_keys();

// The key `name` of `section`, or nullptr.
const KeySpec* find_key(ConfigSection section, std::string_view name);
// The key of a dotted name ("model.hidden_size", "seq_len"), or nullptr.
const KeySpec* find_dotted_key(std::string_view dotted);

// Edit distance (insert, delete, substitute), ASCII case-insensitive.
size_t edit_distance(std::string_view a, std::string_view b);
// The candidate closest to `name` when it is close enough to be a likely typo, else "".
std::string_view closest_name(std::string_view name, std::span<const std::string_view> candidates);

// "unknown key `x`" plus " (did you mean `y`?)" when a key of `section` is close, or the same
// name exists in another section ("hidden_size" at top level: did you mean `model.hidden_size`?).
std::string unknown_key_message(ConfigSection section, std::string_view name);
// The same for a dotted `--set` key, suggesting among all dotted names.
std::string unknown_dotted_key_message(std::string_view dotted);

// Parses the YAML scalar text of a value for `key` and checks it against the key's type and
// allowed values. The error names the key, the value and what is allowed.
Result<ConfigValue> parse_config_value(const KeySpec& key, std::string_view text);

// The YAML text of a value: 8, 0.9, 1e-05, true, grpo, "runs/x" (strings are double-quoted).
std::string format_config_value(const KeySpec& key, const ConfigValue& value);

}  // namespace rlrun
