// render_config: a Config as YAML that load_config() reads back to the same Config.
#include "common/config/schema.h"

#include <filesystem>

namespace rlrun {
namespace {

// What a key accepts, for its comment: "one of: a, b", "[1, 4096]", or "" when anything of its
// type goes.
std::string allowed_text(const KeySpec& key) {
  if (key.type == ValueType::kEnum) {
    std::string out = "one of: ";
    for (int i = 0; !nth_choice(key.choices, i).empty(); ++i) {
      out += str(i > 0 ? ", " : "", nth_choice(key.choices, i));
    }
    return out;
  }
  if (key.type == ValueType::kInt || key.type == ValueType::kFloat) {
    const std::string range = key.bounds.describe();
    return range == "any" ? std::string() : "range " + range;
  }
  return {};
}

void render_section(const Config& config, ConfigSection section, RenderStyle style,
                    std::string& out) {
  const bool commented = style == RenderStyle::kCommented;
  const std::string indent = section == ConfigSection::kTop ? "" : "  ";
  std::string_view group = "\x01";  // no heading printed yet
  bool opened = false;
  for (const KeySpec& key : config_keys()) {
    if (key.section != section) continue;
    if (commented && key.group != group) {
      // A section's first heading goes above its `name:` line.
      out += str("\n", opened ? indent : "", "# ---- ", key.group, "\n");
      group = key.group;
    }
    if (!opened && section != ConfigSection::kTop) out += str(section_name(section), ":\n");
    opened = true;
    if (commented) {
      const std::string allowed = allowed_text(key);
      out += str(indent, "# ", key.comment, allowed.empty() ? "" : str(" (", allowed, ")"), "\n");
    }
    const bool from_checkpoint = section == ConfigSection::kModel && !config.model.checkpoint.empty() &&
                                 is_checkpoint_shape_key(key.name);
    out += str(indent, from_checkpoint ? "# " : "", key.name, ": ", format_config_value(key, key.get(config)),
               from_checkpoint ? "  # from model.checkpoint's config.json" : "", "\n");
  }
}

}  // namespace

std::string render_config(const Config& config, RenderStyle style) {
  std::string out;
  render_section(config, ConfigSection::kTop, style, out);
  render_section(config, ConfigSection::kModel, style, out);
  render_section(config, ConfigSection::kTask, style, out);
  return out;
}

Result<std::string> render_effective_config(const Config& config) {
  // Defaults are relative to the working directory: written out, they would mean relative to the
  // file. Made absolute, the file means the same wherever it is read.
  Config absolute = config;
  std::error_code ec;
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  for (const KeySpec& key : config_keys()) {
    if (!key.bounds.path || ec) continue;
    const std::string path = std::get<std::string>(key.get(absolute));
    if (key.bounds.is_path_value(path) && std::filesystem::path(path).is_relative())
      key.set(absolute, (cwd / path).lexically_normal().string());
  }
  std::string text = render_config(absolute);
  Result<Config> again = load_config_text(text, "the effective config", {});
  if (!again.ok()) {
    return internal_error(str("the effective config would be refused by the workers that read it (a bug in ",
                              "rlrun: please report it with your config):\n", again.status().message()));
  }
  if (!(*again == absolute)) {
    return internal_error("the effective config does not read back to the same values (a bug in rlrun: please "
                          "report it with your config)");
  }
  return text;
}

std::string render_defaults_yaml() {
  return "# configs/defaults.yaml - every rlrun configuration key, its default and its meaning.\n"
         "#\n"
         "# Generated from common/config/keys.def (the one list of keys) by\n"
         "#   rlrun validate --print-defaults > configs/defaults.yaml\n"
         "# and checked against it by tests/common/config/config_schema_test.cc. A run config names\n"
         "# only the keys it changes (see configs/quickstart.yaml); unknown keys are errors.\n"
         "# Paths (run_dir, model.checkpoint, model.tokenizer, task.dataset, task.eval_dataset) written\n"
         "# in a config file are relative to that file's folder; given with --set, to the working\n"
         "# directory.\n" +
         render_config(Config{}, RenderStyle::kCommented);
}

}  // namespace rlrun
