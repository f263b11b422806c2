// render_config: a Config as YAML that load_config() reads back to the same Config.
#include "common/config_schema.h"

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
    out += str(indent, key.name, ": ", format_config_value(key, key.get(config)), "\n");
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

std::string render_defaults_yaml() {
  return "# configs/defaults.yaml - every rlrun configuration key, its default and its meaning.\n"
         "#\n"
         "# Generated from common/config_keys.def (the one list of keys) by\n"
         "#   rlrun validate --print-defaults > configs/defaults.yaml\n"
         "# and checked against it by tests/common/config_schema_test.cc. A run config names\n"
         "# only the keys it changes (see configs/quickstart.yaml); unknown keys are errors.\n" +
         render_config(Config{}, RenderStyle::kCommented);
}

}  // namespace rlrun
