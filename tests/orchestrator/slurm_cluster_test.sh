#!/usr/bin/env bash
# slurm_cluster_test.sh LIVE_TEST_BINARY - the Slurm launcher on a real (single-machine) Slurm.
# Brings up scripts/slurm-test-cluster.sh's two fake nodes with fake GPUs, runs the live test
# binary (tests/orchestrator/slurm_live_test.cc) inside `salloc -N2 --gres=gpu:4` (GPUs known only
# to the controller) and inside `sbatch --wait -N2 --gpus-per-node=2` (SLURM_GPUS_PER_NODE; the
# batch script runs on node1), then stops the daemons. Exit 77 (skipped) when this machine cannot
# run Slurm daemons (not root).
set -euo pipefail
binary=$1
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" -ne 0 ]; then echo "skipped: the test cluster's daemons need root"; exit 77; fi

# Its own root and ports, apart from a developer's `slurm-test-cluster.sh up` on the defaults.
export RLRUN_SLURM_ROOT=/tmp/rlrun-slurm-test-$$ RLRUN_SLURM_CTLD_PORT=6917 RLRUN_SLURM_SLURMD_PORT_BASE=17100
cluster="$repo/scripts/slurm-test-cluster.sh"
work=$(mktemp -d)
cleanup() { "$cluster" down || true; rm -rf "$work" "$RLRUN_SLURM_ROOT"; }
trap cleanup EXIT

t0=$EPOCHREALTIME
RLRUN_SLURM_NODES=2 RLRUN_SLURM_CPUS=4 RLRUN_SLURM_GPUS=4 "$cluster" up
echo "[slurm_cluster_test] cluster up in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.2f", b-a}') s"
eval "$("$cluster" env)"
export RLRUN_SLURM_LIVE_TEST=1

echo "[slurm_cluster_test] salloc -N2 --ntasks-per-node=2 --gres=gpu:4"
RLRUN_SLURM_TEST_GPUS=4 timeout 240 salloc -N2 --ntasks-per-node=2 --gres=gpu:4 --time=5 "$binary" \
  2>&1 | tee "$work/salloc.out"
if grep -q "SKIPPED" "$work/salloc.out"; then echo "[slurm_cluster_test] live tests skipped inside salloc"; exit 1; fi

echo "[slurm_cluster_test] sbatch --wait -N2 --ntasks-per-node=2 --gpus-per-node=2"
rc=0
(cd "$work" && RLRUN_SLURM_TEST_GPUS=2 timeout 240 sbatch --wait --quiet -N2 --ntasks-per-node=2 \
    --gpus-per-node=2 --time=5 --output="$work/batch.out" --wrap="$binary") || rc=$?
cat "$work/batch.out"
[ $rc -eq 0 ] || { echo "[slurm_cluster_test] the batch job failed (sbatch --wait: $rc)"; exit 1; }
grep -q "PASSED" "$work/batch.out"
if grep -q "SKIPPED" "$work/batch.out"; then echo "[slurm_cluster_test] live tests skipped inside the job"; exit 1; fi
echo "[slurm_cluster_test] ok"
