// load_config: defaults < YAML file < --set overrides, then the checkpoint and cross-field rules.
// Every error is collected (with its file:line or --set) instead of stopping at the first.
#include "common/config/load.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/config/schema.h"

namespace rlrun {

void ConfigLoad::error(std::string_view where, std::string_view message) {
  errors.push_back(str(where, ": ", message));
}

std::string ConfigLoad::origin(const std::string& dotted_key) const {
  auto it = origins.find(dotted_key);
  return it == origins.end() ? std::string() : it->second;
}

namespace {

std::string where_of(const std::string& source, const YAML::Mark& mark) {
  return mark.is_null() ? source : str(source, ":", mark.line + 1);
}

const char* node_kind(const YAML::Node& node) {
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "no value";
}

std::string type_phrase(const KeySpec& key) {
  switch (key.type) {
    case ValueType::kInt: return "an integer";
    case ValueType::kFloat: return "a number";
    case ValueType::kBool: return "true or false";
    case ValueType::kString: return "a string (write \"\" for an empty one)";
    case ValueType::kEnum: return "one of " + std::string(key.choices);
  }
  return "a value";
}

// A path as written, made absolute against `base`; "" stays "" (it means "none").
std::string absolute_path(const std::filesystem::path& base, const std::string& path) {
  if (path.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (base / path).lexically_normal().string();
}

// Sets `key` from the YAML node `value`, or records why not.
void apply_node(ConfigLoad& load, const KeySpec& key, const YAML::Node& value,
                const std::string& where, const std::string& origin) {
  const std::string dotted = key.dotted_name();
  if (!value.IsScalar()) {
    load.error(where, str("`", dotted, "` expects ", type_phrase(key), ", got ", node_kind(value)));
    load.rejected.insert(dotted);
    return;
  }
  Result<ConfigValue> parsed = parse_config_value(key, value.Scalar());
  if (!parsed.ok()) {
    load.error(where, parsed.status().message());
    load.rejected.insert(dotted);
    return;
  }
  if (key.bounds.path && key.bounds.is_path_value(std::get<std::string>(*parsed)))
    *parsed = absolute_path(load.path_base, std::get<std::string>(*parsed));
  key.set(load.config, *parsed);
  load.origins[dotted] = origin;
  load.rejected.erase(dotted);  // a later layer fixed it
}

void apply_mapping(ConfigLoad& load, const YAML::Node& map, ConfigSection section,
                   const std::string& source) {
  std::map<std::string, int> first_line;  // duplicate detection within this mapping
  for (const auto& entry : map) {
    const YAML::Node key_node = entry.first;  // copies: Nodes are handles, iterators yield temporaries
    const YAML::Node value = entry.second;
    const std::string where = where_of(source, key_node.Mark());
    if (!key_node.IsScalar()) {
      load.error(where, "a key must be a plain name");
      continue;
    }
    const std::string name = key_node.Scalar();
    const std::string shown = section == ConfigSection::kTop
                                  ? name
                                  : str(section_name(section), ".", name);
    auto [seen, inserted] = first_line.emplace(name, key_node.Mark().line + 1);
    if (!inserted) {
      load.error(where, str("`", shown, "` is given twice (first at line ", seen->second, ")"));
      load.rejected.insert(shown);
      continue;
    }
    if (section == ConfigSection::kTop && (name == "model" || name == "task")) {
      if (value.IsNull()) continue;  // an empty section
      if (!value.IsMap()) {
        load.error(where, str("`", name, "` must be a mapping of ", name, " keys (", name,
                              ":\\n  key: value)"));
        continue;
      }
      apply_mapping(load, value, name == "model" ? ConfigSection::kModel : ConfigSection::kTask,
                    source);
      continue;
    }
    const KeySpec* key = find_key(section, name);
    if (key == nullptr) {
      load.error(where, unknown_key_message(section, name));
      continue;
    }
    apply_node(load, *key, value, where, where);
  }
}

// Layer 2: the run file. Returns false when the text is not a YAML mapping at all.
bool apply_yaml_text(ConfigLoad& load, std::string_view text, const std::string& source) {
  YAML::Node root;
  try {
    const std::vector<YAML::Node> documents = YAML::LoadAll(std::string(text));
    if (documents.size() > 1) {
      load.error(where_of(source, documents[1].Mark()),
                 "a config file holds one YAML document; remove this `---` and what follows");
      return false;
    }
    if (!documents.empty()) root = documents[0];
  } catch (const YAML::ParserException& e) {
    load.error(str(source, ":", e.mark.line + 1, ":", e.mark.column + 1),
               str("YAML syntax error: ", e.msg));
    return false;
  } catch (const std::exception& e) {
    load.error(source, str("cannot parse YAML: ", e.what()));
    return false;
  }
  if (root.IsNull()) return true;  // an empty file: all defaults
  if (!root.IsMap()) {
    load.error(where_of(source, root.Mark()),
               "a config file is a mapping of `key: value` lines, this is not");
    return false;
  }
  try {
    apply_mapping(load, root, ConfigSection::kTop, source);
  } catch (const std::exception& e) {  // yaml-cpp node access; not expected on a parsed tree
    load.error(source, str("cannot read YAML: ", e.what()));
    return false;
  }
  return true;
}

// Layer 3: one `--set key=value`.
void apply_override(ConfigLoad& load, const std::string& override_text) {
  const std::string where = "--set " + override_text;
  const size_t eq = override_text.find('=');
  if (eq == std::string::npos || eq == 0) {
    load.error(where, "expected key=value, e.g. --set model.hidden_size=64");
    return;
  }
  const std::string dotted = override_text.substr(0, eq);
  const std::string value_text = override_text.substr(eq + 1);
  if (dotted == "model" || dotted == "task") {
    load.error(where, str("`", dotted, "` is a section: set its keys one at a time, e.g. --set ",
                          dotted, dotted == "model" ? ".hidden_size=64" : ".name=countdown"));
    return;
  }
  const KeySpec* key = find_dotted_key(dotted);
  if (key == nullptr) {
    load.error(where, unknown_dotted_key_message(dotted));
    return;
  }
  if (value_text.empty()) {  // `--set model.tokenizer=`: the empty string
    apply_node(load, *key, YAML::Node(std::string()), where, where);
    return;
  }
  YAML::Node value;
  try {
    value = YAML::Load(value_text);
  } catch (const std::exception&) {
    load.error(where, str("`", value_text, "` is not a YAML value (quote it: --set ", dotted,
                          "='\"...\"')"));
    load.rejected.insert(dotted);
    return;
  }
  apply_node(load, *key, value, where, where);
}

Result<Config> finish(ConfigLoad& load, bool file_ok) {
  // Rules on a file that could not be read would only describe defaults: skip them.
  if (file_ok) {
    resolve_model_checkpoint(load);
    check_config_rules(load);
  }
  if (load.errors.empty()) return std::move(load.config);
  std::string message;
  for (const std::string& e : load.errors) {
    if (!message.empty()) message += '\n';
    message += e;
  }
  return invalid_argument(message);
}

// Reads `path` whole; records an error and returns false when it cannot.
bool read_config_file(ConfigLoad& load, const std::string& path, std::string* text) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    load.error(path, "config file does not exist");
    return false;
  }
  if (std::filesystem::is_directory(status)) {
    load.error(path, "is a folder, not a config file");
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  if (in) buffer << in.rdbuf();
  if (!in || in.bad()) {
    load.error(path, str("cannot read config file: ", std::strerror(errno)));
    return false;
  }
  *text = buffer.str();
  return true;
}

std::filesystem::path working_directory() {
  std::error_code ec;
  std::filesystem::path cwd = std::filesystem::current_path(ec);
  return ec ? std::filesystem::path("/") : cwd;
}

void apply_overrides(ConfigLoad& load, const std::vector<std::string>& overrides) {
  load.path_base = working_directory();
  for (const std::string& o : overrides) apply_override(load, o);
}

}  // namespace

Result<Config> load_config_text(std::string_view yaml, const std::string& source_name,
                                const std::vector<std::string>& overrides) {
  ConfigLoad load;
  load.path_base = working_directory();  // text with no file: as if it were in the working directory
  const bool file_ok = apply_yaml_text(load, yaml, source_name);
  apply_overrides(load, overrides);
  return finish(load, file_ok);
}

Result<Config> load_config(const std::string& path, const std::vector<std::string>& overrides) {
  ConfigLoad load;
  std::string text;
  bool file_ok = read_config_file(load, path, &text);
  // Paths in a config file mean relative to that file, wherever rlrun is started from.
  load.path_base = std::filesystem::absolute(path).parent_path();
  if (file_ok) file_ok = apply_yaml_text(load, text, path);
  apply_overrides(load, overrides);
  return finish(load, file_ok);
}

}  // namespace rlrun
