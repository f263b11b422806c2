// exit_codes.h - what an rlrun process's exit status means, for every role and tool (the one list;
// scripts and Slurm read them).
#pragma once

namespace rlrun {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;           // the run or the command failed (the log says why)
inline constexpr int kExitUsage = 2;            // the user's input (flags, config) is wrong
inline constexpr int kExitPlanDoesNotFit = 3;   // the memory plan does not fit the devices (rlrun plan, rlrun CONFIG)
inline constexpr int kExitCannotExec = 127;     // a spawned child could not exec (spawn() says why; the shell's convention)

}  // namespace rlrun
