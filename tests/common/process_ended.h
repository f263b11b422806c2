// process_ended(): whether a process a test started (or had started) is gone. A process whose
// parent died is reparented to this machine's init, which may reap it seconds later: its zombie
// has ended all the same.
#pragma once

#include <sys/types.h>

#include <fstream>
#include <string>

namespace rlrun::testing {

inline bool process_ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace rlrun::testing
