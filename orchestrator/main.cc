#include "orchestrator/commands.h"

int main(int argc, char** argv) { return rlrun::orchestrator::rlrun_main(argc, argv); }
