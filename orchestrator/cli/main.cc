#include <signal.h>

#include "orchestrator/cli/commands.h"

int main(int argc, char** argv) {
  // A peer that died mid-collective (Gloo writes to its socket) must come back as an error the
  // caller handles (EPIPE), not end this process too.
  ::signal(SIGPIPE, SIG_IGN);
  return rlrun::orchestrator::rlrun_main(argc, argv);
}
