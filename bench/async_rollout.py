#!/usr/bin/env python3
"""The same config with max_async_rollout 0 (synchronous) and 2: wall seconds per RL step (and
their ratio), trainer and rollout idle fractions (the rlrun_*_idle_seconds_total counters, as
summary.json reports them), and reward and held-out accuracy after the same number of steps.
Medians over --repeats runs of each, alternated so that machine load hits both alike. Prints
figures; never fails on time.

  python3 bench/async_rollout.py [--config configs/quickstart.yaml] [--steps 200] [--repeats 3]
                                 [--set KEY=VALUE ...]   (both sides, e.g. inference_num_workers=2)
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


def run(binary, config, steps, asynchrony, run_dir, overrides):
    args = [binary, config, "--run-dir", run_dir, "--set", f"max_async_rollout={asynchrony}",
            "--set", f"number_of_steps={steps}", "--set", "task.eval_every=0",
            "--set", "metrics_bind=127.0.0.1:0"]
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
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "rlrun"))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for both sides (repeatable)")
    a = p.parse_args()
    results = {0: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="rlrun_bench_async_") as tmp:
        for i in range(a.repeats):
            for asynchrony in (0, 2):
                start = time.time()
                results[asynchrony].append(run(a.binary, a.config, a.steps, asynchrony,
                                               os.path.join(tmp, f"a{asynchrony}-{i}"), a.overrides))
                print(f"  run {i + 1}/{a.repeats} max_async_rollout={asynchrony}: "
                      f"{time.time() - start:.0f} s", file=sys.stderr)
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in results.items()}
    print(f"{a.config}{''.join(' --set ' + kv for kv in a.overrides)}, {a.steps} steps, "
          f"median of {a.repeats} runs each")
    print(f"{'max_async_rollout':>18} {'s/step':>8} {'trainer idle':>13} {'rollout idle':>13} "
          f"{'reward (last 10%)':>18} {'accuracy after':>15}")
    for k in (0, 2):
        m = med[k]
        print(f"{k:>18} {m['seconds_per_step']:>8.3f} {m['trainer_idle']:>13.1%} {m['rollout_idle']:>13.1%} "
              f"{m['reward_last']:>18.3f} {m['accuracy_after']:>15.3f}")
    print(f"wall time per step, async 2 / sync: {med[2]['seconds_per_step'] / med[0]['seconds_per_step']:.2f}")


if __name__ == "__main__":
    main()
