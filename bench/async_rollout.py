#!/usr/bin/env python3
"""The same config with max_async_rollout 0 (synchronous) and 2, each at every rollout worker
count of --workers: wall seconds per RL step, trainer and rollout idle fractions (the
rlrun_*_idle_seconds_total counters, as summary.json reports them), and reward and held-out
accuracy after the same number of steps; then each side at its own best worker count and the
ratio of the two. Medians over --repeats runs of each setting, alternated so that machine load
hits all alike. Prints figures; never fails on time.

  python3 bench/async_rollout.py [--config configs/quickstart.yaml] [--steps N] [--repeats 3]
                                 [--workers 1,2] [--set KEY=VALUE ...]   (every run)

--steps defaults to the config's own number_of_steps (the quickstart: 350, as a user runs it).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(binary, config, steps, asynchrony, workers, run_dir, overrides):
    args = [binary, config, "--run-dir", run_dir, "--set", f"max_async_rollout={asynchrony}",
            "--set", f"inference_num_workers={workers}", "--set", "task.eval_every=0",
            "--set", "metrics_bind=127.0.0.1:0"]
    if steps:
        args += ["--set", f"number_of_steps={steps}"]
    for kv in overrides:
        args += ["--set", kv]
    subprocess.run(args, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        steps_rows = [json.loads(line) for line in f]
    loop = sum(r["wait_seconds"] + r["train_seconds"] + r["weight_sync_seconds"] for r in steps_rows)
    return {
        "seconds_per_step": loop / len(steps_rows),
        "trainer_idle": s["trainer_idle_fraction"],
        "rollout_idle": s["rollout_idle_fraction"],
        "reward_last": s["reward_mean"]["last"],
        "accuracy_after": s["eval"]["accuracy_after"],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/quickstart.yaml")
    p.add_argument("--steps", type=int, default=0, help="RL steps per run (default: the config's)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", default="1,2", help="rollout worker counts to try on each side")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "rlrun"))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for every run (repeatable)")
    a = p.parse_args()
    worker_counts = [int(w) for w in a.workers.split(",")]
    settings = [(asynchrony, w) for w in worker_counts for asynchrony in (0, 2)]
    results = {s: [] for s in settings}
    with tempfile.TemporaryDirectory(prefix="rlrun_bench_async_") as tmp:
        for i in range(a.repeats):
            for asynchrony, w in settings:
                start = time.time()
                results[(asynchrony, w)].append(run(a.binary, a.config, a.steps, asynchrony, w,
                                                    os.path.join(tmp, f"a{asynchrony}-w{w}-{i}"), a.overrides))
                print(f"  run {i + 1}/{a.repeats} max_async_rollout={asynchrony} inference_num_workers={w}: "
                      f"{time.time() - start:.0f} s", file=sys.stderr)
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in results.items()}
    print(f"{a.config}{''.join(' --set ' + kv for kv in a.overrides)}, "
          f"{a.steps or 'the config' + chr(39) + 's'} steps, median of {a.repeats} runs each")
    print(f"{'rollout workers':>15} {'max_async_rollout':>18} {'s/step':>8} {'trainer idle':>13} "
          f"{'rollout idle':>13} {'reward (last 10%)':>18} {'accuracy after':>15}")
    for asynchrony, w in settings:
        m = med[(asynchrony, w)]
        print(f"{w:>15} {asynchrony:>18} {m['seconds_per_step']:>8.3f} {m['trainer_idle']:>13.1%} "
              f"{m['rollout_idle']:>13.1%} {m['reward_last']:>18.3f} {m['accuracy_after']:>15.3f}")
    best = {asynchrony: min((k for k in settings if k[0] == asynchrony), key=lambda k: med[k]["seconds_per_step"])
            for asynchrony in (0, 2)}
    sync, asyn = med[best[0]], med[best[2]]
    print(f"each at its best worker count: sync {best[0][1]} worker(s) {sync['seconds_per_step']:.3f} s/step, "
          f"async {best[2][1]} worker(s) {asyn['seconds_per_step']:.3f}: "
          f"{sync['seconds_per_step'] / asyn['seconds_per_step']:.2f}x less wall time per step; "
          f"held-out accuracy {asyn['accuracy_after']:.3f} async vs {sync['accuracy_after']:.3f} sync "
          f"({asyn['accuracy_after'] - sync['accuracy_after']:+.3f})")


if __name__ == "__main__":
    main()
