#!/usr/bin/env python3
"""The README's first job, `build/rlrun configs/quickstart.yaml`, run N times as a user runs it:
wall seconds, held-out accuracy before and after RL, steps, zero-spread groups kept and the exit
of every run, then min / median / max. Also the load average while it ran (the machine is
shared). Prints figures; never fails on time.

  python3 bench/quickstart_runs.py [--runs 10] [--config configs/quickstart.yaml] [--set KEY=VALUE ...]
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


def run_once(binary, config, overrides, run_dir):
    args = [binary, config, "--run-dir", run_dir, "--set", "metrics_bind=127.0.0.1:0"]
    for o in overrides:
        args += ["--set", o]
    start = time.time()
    done = subprocess.run(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.time() - start
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    return {
        "wall_seconds": wall,
        "exit_code": done.returncode,
        "exit": s["exit"],
        "steps": s["steps_completed"],
        "accuracy_before": s["eval"]["accuracy_before"],
        "accuracy_after": s["eval"]["accuracy_after"],
        "zero_spread_groups_kept": s.get("zero_spread_groups_kept", 0),
        "peak_rss_mb": max(s["peak_memory_bytes"].values()) / 1e6,
    }


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    return f"{min(values):.3g} / {statistics.median(values):.3g} / {max(values):.3g}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--config", default="configs/quickstart.yaml")
    p.add_argument("--set", action="append", default=[], dest="overrides")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "rlrun"))
    a = p.parse_args()
    rows = []
    loads = []
    with tempfile.TemporaryDirectory(prefix="rlrun_bench_quickstart_") as tmp:
        for i in range(a.runs):
            r = run_once(a.binary, a.config, a.overrides, os.path.join(tmp, f"run{i}"))
            loads.append(os.getloadavg()[0])
            rows.append(r)
            print(f"  run {i + 1}/{a.runs}: {r['wall_seconds']:.0f} s, accuracy {r['accuracy_before']} -> "
                  f"{r['accuracy_after']}, {r['steps']} steps, kept {r['zero_spread_groups_kept']} zero-spread "
                  f"groups, exit {r['exit']!r} ({r['exit_code']}), load {loads[-1]:.1f}", file=sys.stderr)
    print(f"{a.config} {' '.join(a.overrides)}: {a.runs} runs on {os.cpu_count()} cores, "
          f"load average {spread(loads)} (min / median / max)")
    print(f"  wall seconds          {spread([r['wall_seconds'] for r in rows])}")
    print(f"  accuracy before RL    {spread([r['accuracy_before'] for r in rows])}")
    print(f"  accuracy after RL     {spread([r['accuracy_after'] for r in rows])}")
    print(f"  zero-spread kept      {spread([r['zero_spread_groups_kept'] for r in rows])}")
    print(f"  peak RSS (MB)         {spread([r['peak_rss_mb'] for r in rows])}")
    finished = sum(1 for r in rows if r["exit"] == "ok" and r["exit_code"] == 0)
    print(f"  finished with exit ok {finished} of {a.runs}")


if __name__ == "__main__":
    main()
