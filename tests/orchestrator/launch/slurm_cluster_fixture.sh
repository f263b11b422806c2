#!/usr/bin/env bash
# slurm_cluster_fixture.sh up|down ROOT - ctest fixture slurm_cluster for the Slurm tests.
#   up    starts scripts/slurm-test-cluster.sh's two fake nodes (4 CPUs, 4 fake GPUs each) under
#         ROOT on free ports; exit 77 (skipped) with the reason where Slurm cannot run here:
#         not root, or slurm-wlm / munge not installed. CI installs them (install-deps.sh --test),
#         so there the tests run; a cluster that does not come up is a failure, not a skip.
#   down  stops its daemons and removes ROOT.
# Tests find the cluster through SLURM_CONF=ROOT/etc/slurm.conf (set by tests/orchestrator/CMakeLists.txt).
set -euo pipefail
action=$1
export RLRUN_SLURM_ROOT=$2
export PATH=$PATH:/usr/sbin:/sbin   # the daemons live in sbin
cluster="$(cd "$(dirname "$0")/../../.." && pwd)/scripts/slurm-test-cluster.sh"

case "$action" in
  up)
    if [ "$(id -u)" -ne 0 ]; then echo "skipped: the test cluster's daemons (slurmctld, slurmd, munged) need root"; exit 77; fi
    for tool in slurmctld slurmd munged sbatch salloc srun scontrol; do
      command -v "$tool" >/dev/null || {
        echo "skipped: $tool is not installed (scripts/install-deps.sh --test installs slurm-wlm and munge)"; exit 77; }
    done
    # Free ports now, so that two build folders (or a developer's cluster) never share one.
    read -r ctld base < <(python3 -c '
import socket
for _ in range(100):
    s = [socket.socket() for _ in range(3)]
    try:
        s[0].bind(("127.0.0.1", 0)); base = s[0].getsockname()[1]
        if base > 60000: continue
        s[1].bind(("127.0.0.1", base + 1)); s[2].bind(("127.0.0.1", base + 2))
        c = socket.socket(); c.bind(("127.0.0.1", 0)); print(c.getsockname()[1], base); break
    except OSError: pass
    finally: [x.close() for x in s]')
    t0=$EPOCHREALTIME
    RLRUN_SLURM_CTLD_PORT=$ctld RLRUN_SLURM_SLURMD_PORT_BASE=$base RLRUN_SLURM_NODES=2 RLRUN_SLURM_CPUS=4 \
      RLRUN_SLURM_GPUS=4 "$cluster" up
    echo "slurm_cluster_fixture: up in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.2f", b-a}') s"
    ;;
  down)
    [ -d "$RLRUN_SLURM_ROOT" ] || { echo "slurm_cluster_fixture: nothing to stop"; exit 0; }
    "$cluster" down
    rm -rf "$RLRUN_SLURM_ROOT"
    ;;
  *) echo "usage: $0 up|down ROOT" >&2; exit 2 ;;
esac
