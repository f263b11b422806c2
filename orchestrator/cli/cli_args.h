// cli_args.h - the command-line shape shared by commands that take a config:
//
//   rlrun [COMMAND] CONFIG [--set key=value ...] [--flag [value] ...]
//
// `--set` may repeat and may be written `--set k=v` or `--set=k=v`; a flag with a value may be
// written `--flag v` or `--flag=v`. Parsing only splits the arguments; load_config() judges the
// overrides.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "orchestrator/cli/commands.h"

namespace rlrun::orchestrator {

// A flag a command accepts beside --set, e.g. {"--print-defaults", false} or {"--out", true}.
struct FlagSpec {
  std::string_view name;  // with the leading "--"
  bool takes_value;
};

struct ConfigArgs {
  std::string config_path;                   // "" when none was given
  std::vector<std::string> overrides;        // "key=value", in command-line order
  std::map<std::string, std::string> flags;  // given flags -> value ("" for switches)

  bool has(std::string_view flag) const;
  std::string value(std::string_view flag, const std::string& fallback = "") const;
  // The value of `flag` as an integer in [lo, hi] (`fallback` when the flag is absent), parsed
  // strictly: anything but a whole decimal number in range is an error naming the flag.
  Result<int64_t> integer(std::string_view flag, int64_t fallback, int64_t lo, int64_t hi) const;
  // A worker role's config: `--config PATH` or the positional PATH, exactly one of them.
  Result<std::string> worker_config_path() const;
};

// Splits `args`. Errors (unknown flag, missing value, a second CONFIG) say which argument and
// what is expected.
Result<ConfigArgs> parse_config_args(const Args& args, std::span<const FlagSpec> flags = {});

// Prints a command-line error ("rlrun plan: unknown flag `--x`; see --help") to stderr and
// returns kExitUsage.
int report_usage_error(std::string_view command, const Status& status);

// Prints load_config()'s errors to stderr as they are, one per line ("run.yaml:3: unknown key
// ..."; editors jump to FILE:LINE), then a count, and returns kExitUsage.
int report_config_errors(std::string_view command, const Status& status);

}  // namespace rlrun::orchestrator
