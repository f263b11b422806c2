// render_config_reference: docs/configuration.md, every key of config/keys.def as a user looks it
// up (type, default, allowed values, meaning), generated so that it cannot fall behind the keys.
#include <string>

#include "common/config/schema.h"

namespace rlrun {
namespace {

// A table cell: `|` would end it, a newline would end the row.
std::string cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

std::string type_text(const KeySpec& key) {
  switch (key.type) {
    case ValueType::kInt: return "integer";
    case ValueType::kFloat: return "number";
    case ValueType::kBool: return "bool";
    case ValueType::kEnum: return "choice";
    case ValueType::kString: return key.bounds.path ? "path" : "string";
  }
  return "";
}

std::string allowed_text(const KeySpec& key) {
  switch (key.type) {
    case ValueType::kEnum: {
      std::string out;
      for (int i = 0; !nth_choice(key.choices, i).empty(); ++i)
        out += str(i > 0 ? ", " : "", "`", nth_choice(key.choices, i), "`");
      return out;
    }
    case ValueType::kInt:
    case ValueType::kFloat: return key.bounds.describe();
    case ValueType::kBool: return "`true`, `false`";
    case ValueType::kString: {
      if (!key.bounds.path) return "any";
      std::string out = "a file or folder";
      for (size_t at = 0; at < key.bounds.words.size();) {
        const size_t bar = std::min(key.bounds.words.find('|', at), key.bounds.words.size());
        out += str(", `", key.bounds.words.substr(at, bar - at), "`");
        at = bar + 1;
      }
      return out;
    }
  }
  return "";
}

std::string default_text(const KeySpec& key, const Config& defaults) {
  const std::string value = format_config_value(key, key.get(defaults));
  return value == "\"\"" ? "(empty)" : str("`", value, "`");
}

}  // namespace

std::string render_config_reference() {
  std::string out =
      "# Configuration reference\n"
      "\n"
      "<!-- Generated from common/config/keys.def by `rlrun validate --print-reference > "
      "docs/configuration.md`;\n"
      "     tests/common/config/config_schema_test.cc fails when this page is stale. Edit keys.def, "
      "not this page. -->\n"
      "\n"
      "Every key rlrun takes, with its type, default, allowed values and meaning. A run config names "
      "only the keys it\n"
      "changes (configs/quickstart.yaml); `configs/defaults.yaml` is every key at its default. Keys "
      "in the `model` and\n"
      "`task` sections are written nested (`model:` then `  hidden_size: 64`), or dotted with "
      "`--set` (`--set model.hidden_size=64`).\n"
      "\n"
      "- An unknown key is an error that names the closest key; keys of the reference framework "
      "rlrun does not take are\n"
      "  refused with the reason.\n"
      "- Paths in a config file are relative to that file's folder; given with `--set`, to the "
      "working directory.\n"
      "- Some keys must agree with others (`inference_num_workers` divisible by "
      "`inference_tensor_parallel_size`, ...):\n"
      "  `rlrun validate CONFIG` checks every rule and prints the effective config without running "
      "anything.\n"
      "- With `model.checkpoint` set, the model's shape keys come from its config.json and may not "
      "be set beside it.\n";
  const Config defaults;
  std::string_view group = "\x01";
  ConfigSection section = ConfigSection::kTop;
  bool first = true;
  for (const KeySpec& key : config_keys()) {
    if (first || key.section != section) {
      section = key.section;
      out += str("\n## ", key.section == ConfigSection::kTop ? std::string("Run") : str("`", section_name(key.section), ":`"),
                 "\n");
      group = "\x01";
    }
    if (first || key.group != group) {
      out += str("\n### ", key.group, "\n\n| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n");
      group = key.group;
    }
    first = false;
    out += str("| `", key.dotted_name(), "` | ", type_text(key), " | ", cell(default_text(key, defaults)), " | ",
               cell(allowed_text(key)), " | ", cell(key.comment), " |\n");
  }
  return out;
}

}  // namespace rlrun
