#include "orchestrator/cli/cli_args.h"

#include <charconv>
#include <cstdio>

#include "common/observe/log.h"

namespace rlrun::orchestrator {

bool ConfigArgs::has(std::string_view flag) const { return flags.count(std::string(flag)) != 0; }

std::string ConfigArgs::value(std::string_view flag, const std::string& fallback) const {
  auto it = flags.find(std::string(flag));
  return it == flags.end() ? fallback : it->second;
}

Result<int64_t> ConfigArgs::integer(std::string_view flag, int64_t fallback, int64_t lo, int64_t hi) const {
  if (!has(flag)) return fallback;
  const std::string text = value(flag);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi)
    return invalid_argument(str(flag, " `", text, "` is not an integer from ", lo, " to ", hi));
  return v;
}

Result<std::string> ConfigArgs::worker_config_path() const {
  if (has("--config") && !config_path.empty()) return invalid_argument("give the config once (--config or PATH)");
  const std::string path = has("--config") ? value("--config") : config_path;
  if (path.empty()) return invalid_argument("missing --config PATH; see --help");
  return path;
}

namespace {

const FlagSpec* find_flag(std::span<const FlagSpec> flags, std::string_view name) {
  for (const FlagSpec& f : flags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace

Result<ConfigArgs> parse_config_args(const Args& args, std::span<const FlagSpec> flags) {
  ConfigArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 2 || a[0] != '-') {
      if (!out.config_path.empty()) {
        return invalid_argument(str("unexpected argument `", a, "`: the config is already `",
                                    out.config_path, "` (one CONFIG per command)"));
      }
      out.config_path = a;
      continue;
    }
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    const bool inline_value = eq != std::string::npos;
    const bool is_set = name == "--set";
    const FlagSpec* spec = is_set ? nullptr : find_flag(flags, name);
    if (!is_set && spec == nullptr) {
      return invalid_argument(str("unknown flag `", name, "`; see --help"));
    }
    const bool takes_value = is_set || spec->takes_value;
    if (!takes_value) {
      if (inline_value) return invalid_argument(str("`", name, "` takes no value, got `", a, "`"));
      out.flags[name] = "";
      continue;
    }
    std::string value;
    if (inline_value) {
      value = a.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return invalid_argument(str("`", name, "` needs a value",
                                  is_set ? ": --set key=value" : ""));
    }
    if (is_set) {
      if (value.find('=') == std::string::npos || value[0] == '=') {
        return invalid_argument(str("`--set ", value, "`: expected key=value, e.g. --set seed=7"));
      }
      out.overrides.push_back(value);
    } else {
      out.flags[name] = value;
    }
  }
  return out;
}

int report_usage_error(std::string_view command, const Status& status) {
  std::fprintf(stderr, "rlrun %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               status.message().c_str());
  return kExitUsage;
}

int report_config_errors(std::string_view command, const Status& status) {
  size_t start = 0, count = 0;
  const std::string& m = status.message();
  while (start < m.size()) {
    size_t end = m.find('\n', start);
    if (end == std::string::npos) end = m.size();
    if (end > start) {
      std::fprintf(stderr, "%s\n", m.substr(start, end - start).c_str());
      ++count;
    }
    start = end + 1;
  }
  std::fprintf(stderr, "rlrun %.*s: the configuration has %zu error%s\n",
               static_cast<int>(command.size()), command.data(), count, count == 1 ? "" : "s");
  return kExitUsage;
}

}  // namespace rlrun::orchestrator
