// The schema table: config/keys.def expanded into KeySpecs, plus key lookup and suggestions.
#include "common/config/schema.h"

#include <algorithm>
#include <cctype>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/check.h"

namespace rlrun {
namespace {

// ---------------------------------------------------------------- allowed ranges used by the .def
constexpr Bounds any_value() { return Bounds{}; }
constexpr Bounds at_least(double lo) { return Bounds{lo, Bounds{}.hi, false, false}; }
constexpr Bounds greater_than(double lo) { return Bounds{lo, Bounds{}.hi, true, false}; }
constexpr Bounds between(double lo, double hi) { return Bounds{lo, hi, false, false}; }
constexpr Bounds open_closed(double lo, double hi) { return Bounds{lo, hi, true, false}; }
constexpr Bounds closed_open(double lo, double hi) { return Bounds{lo, hi, false, true}; }
constexpr Bounds a_path() { return Bounds{.path = true}; }
constexpr Bounds a_path_or(std::string_view words) { return Bounds{.path = true, .words = words}; }

// ---------------------------------------------------------------- member type -> ValueType
template <class T>
constexpr ValueType value_type_of() {
  if constexpr (std::is_same_v<T, int64_t>) return ValueType::kInt;
  else if constexpr (std::is_same_v<T, double>) return ValueType::kFloat;
  else if constexpr (std::is_same_v<T, bool>) return ValueType::kBool;
  else if constexpr (std::is_same_v<T, std::string>) return ValueType::kString;
  else {
    static_assert(std::is_enum_v<T>, "config keys are int64_t, double, bool, std::string or enums");
    return ValueType::kEnum;
  }
}

template <class T>
constexpr std::string_view choices_of() {
  if constexpr (std::is_enum_v<T>) return ConfigEnum<T>::kNames;
  else return {};
}

template <class T>
ConfigValue to_value(const T& member) {
  if constexpr (std::is_enum_v<T>) return std::string(enum_name(member));
  else return ConfigValue(member);
}

template <class T>
void from_value(const ConfigValue& value, T& member) {
  if constexpr (std::is_enum_v<T>) {
    RLRUN_CHECK(std::holds_alternative<std::string>(value));
    const std::string& name = std::get<std::string>(value);
    for (int i = 0;; ++i) {
      const std::string_view choice = nth_choice(ConfigEnum<T>::kNames, i);
      RLRUN_CHECK(!choice.empty(), "not a value of this enum: " + name);
      if (choice == name) {
        member = static_cast<T>(i);
        return;
      }
    }
  } else {
    RLRUN_CHECK(std::holds_alternative<T>(value), "config value of the wrong type");
    member = std::get<T>(value);
  }
}

// One line of the .def: a key, or (name empty) a group heading for the keys after it.
struct Entry {
  KeySpec key;
  std::string_view group_title;
};

#define RLRUN_MEMBER_OF_kTop(c, name) (c).name
#define RLRUN_MEMBER_OF_kModel(c, name) (c).model.name
#define RLRUN_MEMBER_OF_kTask(c, name) (c).task.name
#define RLRUN_SCHEMA_ENTRY(section, type, name, allowed, comment)                               \
  Entry{KeySpec{ConfigSection::section, #name, value_type_of<type>(), choices_of<type>(),        \
                allowed, comment, {},                                                           \
                [](const Config& c) { return to_value(RLRUN_MEMBER_OF_##section(c, name)); },    \
                [](Config& c, const ConfigValue& v) { from_value(v, RLRUN_MEMBER_OF_##section(c, name)); }}, \
        {}},

const Entry kEntries[] = {
#define RLRUN_KEY(type, name, def, allowed, comment) RLRUN_SCHEMA_ENTRY(kTop, type, name, allowed, comment)
#define RLRUN_MODEL_KEY(type, name, def, allowed, comment) RLRUN_SCHEMA_ENTRY(kModel, type, name, allowed, comment)
#define RLRUN_TASK_KEY(type, name, def, allowed, comment) RLRUN_SCHEMA_ENTRY(kTask, type, name, allowed, comment)
#define RLRUN_GROUP(title) Entry{KeySpec{}, title},
#include "common/config/keys.def"
};

std::vector<KeySpec> build_keys() {
  std::vector<KeySpec> keys;
  std::string_view group;
  for (const Entry& e : kEntries) {
    if (e.key.name.empty()) {
      group = e.group_title;
      continue;
    }
    keys.push_back(e.key);
    keys.back().group = group;
  }
  return keys;
}

bool close_enough(size_t distance, std::string_view name) {
  // One edit in four characters, at least one: `max_async_rollot` (1 edit in 16) is a typo,
  // `temp` -> `top_p` (3 edits in 4) is not.
  return distance > 0 && distance <= std::max<size_t>(1, name.size() / 4 + 1) &&
         distance < name.size();
}

}  // namespace

std::string_view section_name(ConfigSection section) {
  switch (section) {
    case ConfigSection::kTop: return "";
    case ConfigSection::kModel: return "model";
    case ConfigSection::kTask: return "task";
  }
  return "";
}

std::string KeySpec::dotted_name() const {
  if (section == ConfigSection::kTop) return std::string(name);
  return std::string(section_name(section)) + "." + std::string(name);
}

std::span<const KeySpec> config_keys() {
  static const std::vector<KeySpec> keys = build_keys();
  return keys;
}

const KeySpec* find_key(ConfigSection section, std::string_view name) {
  for (const KeySpec& k : config_keys()) {
    if (k.section == section && k.name == name) return &k;
  }
  return nullptr;
}

const KeySpec* find_dotted_key(std::string_view dotted) {
  for (const KeySpec& k : config_keys()) {
    if (k.dotted_name() == dotted) return &k;
  }
  return nullptr;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];  // row[i-1][j-1]
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      const size_t next = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = row[j];
      row[j] = next;
    }
  }
  return row[b.size()];
}

std::string_view closest_name(std::string_view name, std::span<const std::string_view> candidates) {
  std::string_view best;
  size_t best_distance = 0;
  for (std::string_view c : candidates) {
    const size_t d = edit_distance(name, c);
    if (best.empty() || d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  if (best.empty()) return {};
  // A case-only difference (distance 0 but not equal) is a typo too.
  if (best_distance == 0) return best == name ? std::string_view{} : best;
  return close_enough(best_distance, name) ? best : std::string_view{};
}

namespace {

// Keys of the reference system rlrun does not take, and why: a config brought from there gets
// the reason, not a bare "unknown key".
constexpr std::pair<std::string_view, std::string_view> kRetiredKeys[] = {
    {"free_lane_after_generation",
     "rlrun scores a sample as it arrives, so with enable_individual_sample_lanes a sample's lane is "
     "always free as soon as it stops generating; remove the key"},
    {"weight_broadcast_pin_memory",
     "device backends broadcast weights device to device (NCCL); weight_broadcast_cpu_staging stages "
     "through one bucket-sized host buffer, not pinned; remove the key"},
};

std::string retired_key_message(std::string_view name) {
  for (const auto& [key, why] : kRetiredKeys) {
    if (key != name) continue;
    std::string message(1, '`');
    message.append(key).append("` is not an rlrun key: ").append(why);
    return message;
  }
  return {};
}

}  // namespace

std::string unknown_key_message(ConfigSection section, std::string_view name) {
  if (section == ConfigSection::kTop) {
    if (std::string retired = retired_key_message(name); !retired.empty()) return retired;
  }
  std::string message = "unknown key `" + std::string(name) + "`";
  if (section == ConfigSection::kTop && (name == "model" || name == "task")) return message;
  // The exact name in another section is the likeliest intent.
  for (const KeySpec& k : config_keys()) {
    if (k.section != section && k.name == name) {
      const std::string where = k.section == ConfigSection::kTop ? "top-level " : "";
      return message + " (did you mean " + where + "`" + k.dotted_name() + "`?)";
    }
  }
  std::vector<std::string_view> names;
  for (const KeySpec& k : config_keys()) {
    if (k.section == section) names.push_back(k.name);
  }
  if (section == ConfigSection::kTop) {
    names.push_back("model");
    names.push_back("task");
  }
  const std::string_view best = closest_name(name, names);
  if (!best.empty()) message += " (did you mean `" + std::string(best) + "`?)";
  return message;
}

std::string unknown_dotted_key_message(std::string_view dotted) {
  if (std::string retired = retired_key_message(dotted); !retired.empty()) return retired;
  std::string message = "unknown key `" + std::string(dotted) + "`";
  std::vector<std::string> owned;
  for (const KeySpec& k : config_keys()) owned.push_back(k.dotted_name());
  // `hidden_size` for `model.hidden_size`: the bare name of a section key.
  for (const KeySpec& k : config_keys()) {
    if (k.section != ConfigSection::kTop && k.name == dotted) {
      return message + " (did you mean `" + k.dotted_name() + "`?)";
    }
  }
  const std::vector<std::string_view> names(owned.begin(), owned.end());
  const std::string_view best = closest_name(dotted, names);
  if (!best.empty()) message += " (did you mean `" + std::string(best) + "`?)";
  return message;
}

}  // namespace rlrun
