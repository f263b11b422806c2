// commands.h - the subcommands of the one `rlrun` binary. Every role (orchestrator, trainer rank,
// rollout worker) and every tool (validate, plan, generate) is a Command; main() dispatches.
//
// Exit codes: common/exit_codes.h.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/exit_codes.h"

namespace rlrun::orchestrator {

using Args = std::vector<std::string>;  // the arguments after the command name


struct Command {
  std::string_view name;
  std::string_view summary;  // one line for `rlrun --help`
  std::string_view usage;    // the full text of `rlrun NAME --help`
  int (*run)(const Args& args);
};

// All commands, in the order `rlrun --help` lists them. The first is the default: `rlrun CONFIG`
// means `rlrun run CONFIG`.
std::span<const Command> commands();

const Command* find_command(std::string_view name);

// Entry point of the binary; returns the process exit code.
int rlrun_main(int argc, char** argv);

}  // namespace rlrun::orchestrator
