#!/usr/bin/env python3
"""How well `rlrun tune` predicts: for each task, one base run measures the costs; every other
configuration is predicted from the base run's profile (`rlrun tune BASE --set ... --json`) and then
run for real. Prints predicted vs measured seconds per RL step (wait + train + weight sync, as
metrics.jsonl splits it) and trainer/rollout idle fractions (summary.json), with the error of each.
Goal (issue "Balance the loop"): within 15% for step time and 0.1 for idle fractions. Runs keep
groups without reward spread (discard_group_zero_advantage: false), so that the work per step
does not depend on how far each run happened to learn. Prints figures; never fails on time.

  python3 bench/tune_accuracy.py [--config configs/quickstart.yaml] [--steps 60] [--repeats 1]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (name, the task's --set values, then configurations: name -> --set values). The first
# configuration of each task is its base run.
TASKS = [
    ("reverse-3", [], [
        ("base: 1 rollout, 1 trainer, async 1", []),
        ("synchronous", ["max_async_rollout=0"]),
        ("2 rollouts, async 2", ["inference_num_workers=2", "max_async_rollout=2"]),
        ("2 rollouts, synchronous", ["inference_num_workers=2", "max_async_rollout=0"]),
        ("2 trainer ranks", ["trainer_num_workers=2"]),
        ("4 minibatches", ["number_of_minibatches=4"]),
        ("2 lanes", ["max_concurrent_prompts_per_server=2"]),
    ]),
    ("reverse-6, partial credit", ["task.min_length=6", "task.max_length=6", "max_tokens=12", "task.partial_credit=true"], [
        ("base: 1 rollout, 1 trainer, async 1", []),
        ("synchronous", ["max_async_rollout=0"]),
        ("2 rollouts, async 2", ["inference_num_workers=2", "max_async_rollout=2"]),
    ]),
]

TUNABLE = ("inference_num_workers", "trainer_num_workers", "max_async_rollout", "number_of_minibatches",
           "prompts_batch_size_for_trainer", "max_concurrent_prompts_per_server")


def sets(values):
    out = []
    for v in values:
        out += ["--set", v]
    return out


def run(binary, config, steps, task_sets, config_sets, run_dir):
    # Every group is trained (no zero-spread discards): the work per step then does not depend on
    # how far each run happened to learn, so runs of one task are comparable.
    args = [binary, config, "--run-dir", run_dir, "--set", f"number_of_steps={steps}", "--set", "task.eval_every=0",
            "--set", "metrics_bind=127.0.0.1:0", "--set", "discard_group_zero_advantage=false"] + sets(task_sets + config_sets)
    done = subprocess.run(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:  # e.g. a policy that never earns a reward: no batch forms
        last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        print(f"  run failed ({done.returncode}): {last[:300]}", file=sys.stderr)
        return None
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    loop = sum(r["wait_seconds"] + r["train_seconds"] + r["weight_sync_seconds"] for r in rows)
    return {"s": loop / len(rows), "trainer": s["trainer_idle_fraction"], "rollout": s["rollout_idle_fraction"]}


def predict(binary, base_dir, config_sets):
    tunable = [v for v in config_sets if v.split("=")[0] in TUNABLE]
    out = subprocess.run([binary, "tune", base_dir, "--json"] + sets(tunable), cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    # "prediction" is for the --set values; with none it is the recommended setting's, so the
    # run's own settings are "current".
    p = json.loads(out)["prediction" if tunable else "current"]
    return {"s": p["seconds_per_step"], "trainer": p["trainer_idle_fraction"], "rollout": p["rollout_idle_fraction"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/quickstart.yaml")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--repeats", type=int, default=1, help="measured runs per configuration (median)")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "rlrun"))
    a = p.parse_args()
    table = []
    with tempfile.TemporaryDirectory(prefix="rlrun_bench_tune_") as tmp:
        for task, task_sets, configs in TASKS:
            base_dir = os.path.join(tmp, f"{task}-base")
            base = run(a.binary, a.config, a.steps, task_sets, configs[0][1], base_dir)
            if base is None:
                continue
            for name, config_sets in configs:
                predicted = predict(a.binary, base_dir, config_sets)
                measured = [base] if not config_sets else []
                for i in range(a.repeats - len(measured)):
                    m = run(a.binary, a.config, a.steps, task_sets, config_sets,
                            os.path.join(tmp, f"{task}-{name}-{i}".replace(" ", "_").replace(",", "").replace(":", "")))
                    if m is not None:
                        measured.append(m)
                if not measured:
                    continue
                med = {k: statistics.median(m[k] for m in measured) for k in ("s", "trainer", "rollout")}
                table.append((task, name, med, predicted))
                print(f"  {task}: {name}: measured {med['s']:.3f} s/step, predicted {predicted['s']:.3f}",
                      file=sys.stderr)
    print(f"{a.config}, {a.steps} steps per run; predictions from each task's base run "
          f"(median of {a.repeats} measured run(s) each)")
    print(f"{'task':<26} {'configuration':<36} {'s/step meas':>11} {'pred':>7} {'err':>6} "
          f"{'trainer idle m/p':>17} {'rollout idle m/p':>17}")
    errors, idle_errors = [], []
    for task, name, m, p in table:
        err = p["s"] / m["s"] - 1
        errors.append(abs(err))
        idle_errors += [abs(p["trainer"] - m["trainer"]), abs(p["rollout"] - m["rollout"])]
        print(f"{task:<26} {name:<36} {m['s']:>11.3f} {p['s']:>7.3f} {err:>+6.0%} "
              f"{m['trainer']:>8.2f}/{p['trainer']:<8.2f} {m['rollout']:>8.2f}/{p['rollout']:<8.2f}")
    print(f"step time error: median {statistics.median(errors):.0%}, worst {max(errors):.0%} (goal 15%); "
          f"idle fraction error: median {statistics.median(idle_errors):.2f}, worst {max(idle_errors):.2f} (goal 0.10)")


if __name__ == "__main__":
    main()
