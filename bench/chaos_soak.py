#!/usr/bin/env python3
"""chaos_soak - a real multi-process run under random worker faults, and its resource slopes.

Runs configs/quickstart.yaml with two trainer ranks and --rollouts rollout workers (local launcher,
a checkpoint every --checkpoint-every steps, restart limits raised for a soak) for --minutes, and
at random moments drawn from --seed (printed) SIGKILLs or SIGSTOPs a worker process: a trainer rank
or a rollout worker, in turn in a shuffled order so that every one is hit. A stopped process is
left stopped: the run's own timeouts must find it (heartbeat_timeout_seconds for a rollout worker,
train_step_timeout_seconds for a trainer rank). Some faults are aimed at a checkpoint write (fired
10-80 ms after the line of a step that checkpoints lands in metrics.jsonl) or at a weight sync
(fired within 20 ms of the orchestrator's debug line "weight sync of version N begins"); the
orchestrator's timeline then says where each fault really landed. One fault at a time: the next waits until the
last one's process was replaced and a step completed after it (bounded). No faults in the last
--quiet-seconds; then the run is stopped with SIGTERM (or, with --steps, finishes by itself).

At the end a table: steps, faults injected (by kind, target and where they landed), recovered,
`lost` samples (summary.json), anomalies, and the learning curve (held-out accuracy and reward
before the first fault and at the end). Anomalies: a run that died or hung, a fault the run never
recorded or never recovered from, a process left behind, summary.json's accounting not adding up
or its ledger anomalies, and in metrics.jsonl a step number that goes back or skips in lines not
marked redone, a group trained in two steps, or a redone step trained on other groups.
Exit status 1 when lost or anomalies are not 0 (or, with --expect-faults, fewer faults recovered).

--sample-resources also reads every process's resident memory, open fds and threads every
--sample-every seconds, and the size of every file of the run folder, and prints each one's
least-squares slope per hour over the samples after --warmup-minutes. The flatness check:
  python3 bench/chaos_soak.py --faults none --minutes 30 --sample-resources
The soak:
  python3 bench/chaos_soak.py --minutes 20 --seed 1
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECOVERY_BOUND_SECONDS = 240  # a fault not recovered from by then is an anomaly
STOP_BOUND_SECONDS = 300      # the run must end this long after its SIGTERM (or its last step)


def run_settings(a):
    steps = a.steps if a.steps else 100000000
    sets = [f"trainer_num_workers=2", f"inference_num_workers={a.rollouts}", f"number_of_steps={steps}",
            f"checkpoint_every={a.checkpoint_every}", "max_trainer_restarts=1000", "max_worker_restarts=1000",
            "trainer_restart_backoff_seconds=0.5", "worker_restart_backoff_seconds=0.5",
            "restart_backoff_max_seconds=8", "heartbeat_timeout_seconds=5", "train_step_timeout_seconds=30",
            "metrics_bind=127.0.0.1:0", "task.eval_every=25",
            "log_level=debug"]  # the orchestrator logs when each weight sync begins (aimed faults)
    return sets + a.overrides


class Tail:
    """The lines appended to a file since the last read (a torn last line waits for its end)."""

    def __init__(self, path):
        self.path, self.offset, self.rest = path, 0, ""

    def lines(self):
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                text = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return []
        text = self.rest + text
        parts = text.split("\n")
        self.rest = parts.pop()
        return parts


def proc_alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def proc_parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, IndexError, ValueError):
        return -1


def proc_resources(pid):
    """(resident MiB, open fds, threads) of `pid`, or None when it is gone."""
    try:
        rss = threads = None
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
        return rss, len(os.listdir(f"/proc/{pid}/fd")), threads
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


class Soak:
    def __init__(self, a, run_dir):
        self.a, self.run_dir = a, run_dir
        self.rng = random.Random(a.seed)
        self.out_path = os.path.join(os.path.dirname(run_dir), "out")
        self.log = Tail(self.out_path)
        self.metrics = Tail(os.path.join(run_dir, "metrics.jsonl"))
        self.pids = {}        # worker name -> (pid, unix time it registered), the newest
        self.lines = []       # metrics.jsonl lines, with "_at" (unix time read)
        self.sync_begun = 0   # unix time the newest "weight sync of version N begins" was read
        self.faults = []      # injections, oldest first
        self.anomalies = []
        self.samples = []     # resource samples (t, name, pid, rss MiB, fds, threads)
        self.file_sizes = []  # (t, {relative path: bytes})
        self.targets = ["trainer-0", "trainer-1"] + [f"rollout-{i}" for i in range(a.rollouts)]
        self.bag = []
        self.kinds = {"none": [], "kill": ["kill"], "stop": ["stop"]}.get(a.faults, ["kill", "kill", "stop"])

    # ---- reading the run
    def read(self):
        for line in self.log.lines():
            if " begins" in line and "weight sync of version " in line:
                self.sync_begun = time.time()
            at = line.find(" registered (pid ")
            if at > 0:
                name = line[:at].rsplit("] ", 1)[-1].strip()
                self.pids[name] = (int(line[at + len(" registered (pid "):].split()[0]), time.time())
        for line in self.metrics.lines():
            if line.strip():
                entry = json.loads(line)
                entry["_at"] = time.time()
                self.lines.append(entry)

    def step(self):
        return self.lines[-1]["step"] if self.lines else 0

    # ---- faults
    def next_fault_delay(self):
        return max(3.0, self.rng.expovariate(1.0 / self.a.mean_interval))

    def choose(self):
        if not self.bag:
            self.bag = list(self.targets)
            self.rng.shuffle(self.bag)
        target = self.bag.pop()
        kind = self.rng.choice(self.kinds)
        moment = self.rng.choice(["random", "random", "checkpoint", "weight_sync"])
        if moment == "weight_sync" and target == "trainer-1":
            moment = "checkpoint"  # rank 1 has no part in a weight sync
        return kind, target, moment

    def fire(self, kind, target, moment):
        pid = self.pids.get(target, (0, 0))[0]
        if not pid or not proc_alive(pid) or proc_parent(pid) != self.proc.pid:
            return False  # not (re)registered yet: try again shortly
        os.kill(pid, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
        self.faults.append({"at": time.time(), "kind": kind, "target": target, "pid": pid, "moment": moment,
                            "step": self.step(), "recovered_at": None, "landed": None})
        print(f"  {time.strftime('%H:%M:%S')} step {self.step():5d}: SIG{kind.upper()} {target} (pid {pid}), "
              f"aimed at: {moment}", flush=True)
        return True

    def recovered(self, f):
        """The victim was replaced (registered again) and a step completed after that."""
        reg = self.pids.get(f["target"], (0, 0))
        if reg[0] == f["pid"] or reg[1] < f["at"] or proc_alive(f["pid"]):
            return False
        return any(line["_at"] >= reg[1] for line in self.lines[-3:])

    def aim_at(self, moment, now):
        """Unix time to fire an aimed fault, or None while its moment has not come yet."""
        if moment == "weight_sync":  # a sync takes ~40 ms: fire within its first 20 ms
            return now + self.rng.uniform(0, 0.02) if now - self.sync_begun < 0.005 else None
        # checkpoint: it starts right after the line of a step that saves one, and takes 0.1-0.3 s
        if not self.lines or now - self.lines[-1]["_at"] > 0.05:
            return None  # a fresh metrics.jsonl line only
        last = self.lines[-1]
        return last["_at"] + self.rng.uniform(0.01, 0.08) if last["step"] % self.a.checkpoint_every == 0 else None

    # ---- resources
    def sample_resources(self, now):
        named = [("orchestrator", self.proc.pid)] + [(n, p) for n, (p, _) in sorted(self.pids.items())]
        for name, pid in named:
            r = proc_resources(pid)
            if r and r[0] is not None:
                self.samples.append((now, name, pid) + r)
        sizes = {}
        for base, _, files in os.walk(self.run_dir):
            if "checkpoints" in base or "model" in os.path.relpath(base, self.run_dir).split(os.sep)[0:1]:
                continue
            for name in files:
                path = os.path.join(base, name)
                try:
                    sizes[os.path.relpath(path, self.run_dir)] = os.path.getsize(path)
                except FileNotFoundError:
                    pass
        self.file_sizes.append((now, sizes))

    # ---- the run
    def run(self, cmd):
        a = self.a
        with open(self.out_path, "w") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        start = time.monotonic()
        end = start + a.minutes * 60
        next_fault = None  # monotonic time of the next fault, once RL steps began
        pending = None     # (kind, target, moment, fire-at unix or None, armed since)
        last_sample = -1e9
        sigterm_at = None
        while True:
            now_m, now = time.monotonic(), time.time()
            self.read()
            if self.proc.poll() is not None:
                break
            if a.sample_resources and now_m - last_sample >= a.sample_every:
                self.sample_resources(now)
                last_sample = now_m
            last = self.faults[-1] if self.faults else None
            if last and last["recovered_at"] is None:
                if self.recovered(last):
                    last["recovered_at"] = now
                    print(f"  {time.strftime('%H:%M:%S')} step {self.step():5d}: recovered from {last['target']} "
                          f"in {now - last['at']:.1f} s", flush=True)
                elif now - last["at"] > RECOVERY_BOUND_SECONDS and not last.get("late"):
                    last["late"] = True
                    self.anomalies.append(f"{last['target']} ({last['kind']} at step {last['step']}) not recovered "
                                          f"within {RECOVERY_BOUND_SECONDS} s")
            quiet = (a.steps and self.step() >= a.steps * 0.85) or now_m > end - a.quiet_seconds
            if self.kinds and self.lines and next_fault is None:
                next_fault = now_m + self.next_fault_delay()
            busy = last is not None and last["recovered_at"] is None and not last.get("late")
            capped = a.max_faults and len(self.faults) >= a.max_faults
            if next_fault is not None and now_m >= next_fault and not busy and not quiet and not capped:
                if pending is None:
                    kind, target, moment = self.choose()
                    pending = [kind, target, moment, None, now_m]
                if pending[2] != "random" and pending[3] is None:
                    pending[3] = self.aim_at(pending[2], now)
                    if pending[3] is None and now_m - pending[4] > 60:
                        pending[2], pending[3] = pending[2] + " (never came: fired at random)", now
                fire_at = now if pending[2] == "random" else pending[3]
                if fire_at is not None and now >= fire_at and self.fire(*pending[:3]):
                    pending, next_fault = None, now_m + self.next_fault_delay()
            if not a.steps and now_m >= end and not busy and sigterm_at is None:
                print(f"  {time.strftime('%H:%M:%S')} step {self.step():5d}: --minutes {a.minutes} over, SIGTERM "
                      "to the run", flush=True)
                self.proc.send_signal(signal.SIGTERM)
                sigterm_at = now_m
            late = (a.steps and now_m > end) or (sigterm_at and now_m > sigterm_at + STOP_BOUND_SECONDS)
            if late:
                self.anomalies.append(f"the run did not finish its {a.steps} steps within --minutes {a.minutes}: killed"
                                      if a.steps else f"the run did not end within {STOP_BOUND_SECONDS} s of its "
                                      "SIGTERM: killed")
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                break
            armed = pending is not None and pending[2] != "random"
            time.sleep(0.002 if armed else 0.05)
        self.read()
        self.exit_code = self.proc.returncode
        self.cleanup()

    def cleanup(self):
        """Every worker must be gone with the run: a left-over process is an anomaly (then killed)."""
        time.sleep(1)
        pids = {p for p, _ in self.pids.values()} | {f["pid"] for f in self.faults}
        for pid in sorted(pids):
            if proc_alive(pid) and proc_parent(pid) in (1, self.proc.pid):
                self.anomalies.append(f"process {pid} still alive after the run ended: killed")
                os.kill(pid, signal.SIGKILL)


# ---- after the run
def check_accounting(summary, anomalies):
    s = summary["samples"]
    if s["anomalies"]:
        anomalies.append(f"summary.json counts {s['anomalies']} ledger anomalies (a refused sample transition)")
    discarded = sum(s["discarded"].values())
    if s["trained"] + discarded - s["discarded"].get("generation_error", 0) != s["generated"]:
        anomalies.append(f"trained {s['trained']} + discarded {discarded} != generated {s['generated']}")
    if s["trained"] + discarded + s["cancelled"] + s["in_flight_at_exit"] != s["dispatched"]:
        anomalies.append(f"trained + discarded + cancelled + in flight != dispatched {s['dispatched']}")


def check_metrics_lines(lines, anomalies):
    """Step numbers, and which groups each step trained, across restarts and redone steps."""
    groups_of = {}  # step -> group ids when first trained
    seen = {}       # group id -> step that trained it
    top = 0
    for line in lines:
        step, groups, redone = line["step"], line.get("group_ids", []), line.get("redone", False)
        if redone and step == top + 1 and step not in groups_of:
            redone = False  # the step in training at the failure: its first line (marked redone all the same)
        if redone:
            if step > top:
                anomalies.append(f"metrics.jsonl: step {step} redone before it was ever trained")
            elif groups_of.get(step) != groups:
                anomalies.append(f"metrics.jsonl: step {step} redone on other groups than it first trained")
            continue
        if step != top + 1:
            anomalies.append(f"metrics.jsonl: step {step} follows step {top} in lines not marked redone")
        top = max(top, step)
        groups_of[step] = groups
        for g in groups:
            if g in seen:
                anomalies.append(f"metrics.jsonl: group {g} trained in step {seen[g]} and again in step {step}")
            seen[g] = step
    return top


def match_failures(faults, summary, anomalies):
    """Each fault must be a failure the run recorded; returns failures the soak did not cause."""
    rollout = [dict(f, kind="rollout") for f in summary.get("worker_failures", [])]
    trainer = [dict(f, kind="trainer") for f in summary.get("trainer_failures", [])]
    for f in faults:
        pool = trainer if f["target"].startswith("trainer") else rollout
        match = next((r for r in pool if (r["detected_at"] or 0) >= f["at"] - 0.5 and
                      (r["kind"] == "trainer" or r["worker"] == f["target"])), None)
        if match is None:
            anomalies.append(f"{f['kind']} of {f['target']} at step {f['step']} not recorded as a failure by the run")
            continue
        pool.remove(match)
        f["reason"] = match["reason"]
        f["detected_after"] = match["detected_at"] - f["at"]
    return rollout + trainer


def landed(faults, run_dir):
    """Where each fault fell, by the orchestrator's timeline spans (Unix microseconds)."""
    spans = []
    for name in ("timeline-orchestrator.1.json", "timeline-orchestrator.json"):
        try:
            with open(os.path.join(run_dir, name)) as f:
                for line in f:
                    line = line.strip().rstrip(",")
                    if not line.startswith("{"):
                        continue
                    try:
                        e = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if e.get("ph") == "X" and e["name"] in ("weight_sync", "checkpoint", "trainer_restart"):
                        spans.append((e["ts"], e["ts"] + e["dur"], e["name"]))
        except FileNotFoundError:
            pass
    for f in faults:
        t = f["at"] * 1e6
        inside = [n for a, b, n in spans if a <= t <= b]
        f["landed"] = inside[0] if inside else "between"


def slope_per_hour(points):
    """Least-squares slope of (t seconds, value) points, per hour; None for fewer than 3 points."""
    if len(points) < 3:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return None if var == 0 else sum((t - mt) * (v - mv) for t, v in points) / var * 3600


def resource_report(soak, t0, warmup):
    print(f"\nresources after {warmup:.0f} s of warm-up (least-squares slope per hour; first -> last sample):")
    print(f"  {'process':<14} {'pid':>7} {'n':>4} {'RSS MiB':>15} {'MiB/h':>8} {'fds':>9} {'fds/h':>7} "
          f"{'threads':>9} {'thr/h':>7}")
    out = []
    for key in sorted({(s[1], s[2]) for s in soak.samples}):
        pts = [s for s in soak.samples if (s[1], s[2]) == key and s[0] - t0 >= warmup]
        if len(pts) < 3:
            continue
        row = {"process": key[0], "pid": key[1], "samples": len(pts)}
        cells = []
        for i, what in ((3, "rss_mib"), (4, "fds"), (5, "threads")):
            slope = slope_per_hour([(p[0], p[i]) for p in pts])
            row[what] = [pts[0][i], pts[-1][i]]
            row[what + "_per_hour"] = slope
            first = f"{pts[0][i]:.1f}->{pts[-1][i]:.1f}" if i == 3 else f"{pts[0][i]}->{pts[-1][i]}"
            cells.append(f"{first:>{15 if i == 3 else 9}} {slope:>{8 if i == 3 else 7}.2f}")
        print(f"  {key[0]:<14} {key[1]:>7} {len(pts):>4} " + " ".join(cells))
        out.append(row)
    files = {}
    late = [(t, sizes) for t, sizes in soak.file_sizes if t - t0 >= warmup]
    if len(late) >= 3:
        print("  run-folder files (bytes/hour growth, size at the end):")
        for path in sorted(late[-1][1]):
            slope = slope_per_hour([(t, sizes[path]) for t, sizes in late if path in sizes])
            files[path] = {"bytes": late[-1][1][path], "bytes_per_hour": slope}
            if slope:
                print(f"    {path:<36} {slope / 1e6:9.2f} MB/h  {late[-1][1][path] / 1e6:9.2f} MB")
    return out, files


def eval_curve(soak, summary):
    """(accuracy, reward) before the first fault and at the end; reward as the mean of 20 steps."""
    first = soak.faults[0]["at"] if soak.faults else None
    lines = [l for l in soak.lines if not l.get("redone")]
    before = [l for l in lines if first is None or l["_at"] < first]
    acc_before = next((l["eval_accuracy"] for l in reversed(before) if "eval_accuracy" in l),
                      summary["eval"]["accuracy_before"])
    mean = lambda ls: sum(l["reward_mean"] for l in ls) / len(ls) if ls else None  # noqa: E731
    return {"accuracy_before_rl": summary["eval"]["accuracy_before"], "accuracy_at_first_fault": acc_before,
            "accuracy_at_end": summary["eval"]["accuracy_after"],
            "reward_before_first_fault": mean(before[-20:]), "reward_at_end": mean(lines[-20:])}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--minutes", type=float, default=20)
    p.add_argument("--steps", type=int, default=0, help="run this many steps and let the run finish (CI)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--faults", choices=["kill,stop", "kill", "stop", "none"], default="kill,stop")
    p.add_argument("--mean-interval", type=float, default=30, help="mean seconds between faults")
    p.add_argument("--max-faults", type=int, default=0)
    p.add_argument("--expect-faults", type=int, default=0, help="fail unless at least this many were recovered")
    p.add_argument("--quiet-seconds", type=float, default=60)
    p.add_argument("--rollouts", type=int, default=2)
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--sample-resources", action="store_true")
    p.add_argument("--sample-every", type=float, default=10)
    p.add_argument("--warmup-minutes", type=float, default=4)
    p.add_argument("--config", default="configs/quickstart.yaml")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "rlrun"))
    p.add_argument("--keep", help="run folder to keep (default: a temporary one, removed)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    a = p.parse_args()
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1 << 31)
    base = a.keep or tempfile.mkdtemp(prefix="rlrun_chaos_soak_")
    os.makedirs(base, exist_ok=True)
    run_dir = os.path.join(base, "run")
    cmd = [a.binary, a.config, "--run-dir", run_dir]
    for s in run_settings(a):
        cmd += ["--set", s]
    print(f"chaos_soak: seed {a.seed}, faults {a.faults}, "
          f"{f'{a.steps} steps' if a.steps else f'{a.minutes} min'}, mean interval {a.mean_interval} s\n"
          f"  {' '.join(cmd)}\n  run folder {run_dir}", flush=True)
    soak = Soak(a, run_dir)
    t0 = time.time()
    soak.run(cmd)
    anomalies = soak.anomalies
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError) as e:
        print(f"chaos_soak: no summary.json ({e}); see {soak.out_path}")
        return 1
    want_exit = "ok" if a.steps else "interrupted"
    if summary["exit"] != want_exit:
        anomalies.append(f"the run ended with exit {summary['exit']!r}, not {want_exit!r} (exit code {soak.exit_code})")
    if a.steps and summary["steps_completed"] != a.steps:
        anomalies.append(f"{summary['steps_completed']} of {a.steps} steps completed")
    check_accounting(summary, anomalies)
    top = check_metrics_lines(soak.lines, anomalies)
    if summary["steps_completed"] != (soak.lines[-1]["step"] if soak.lines else 0):
        anomalies.append(f"summary.json says {summary['steps_completed']} steps, metrics.jsonl ends at "
                         f"{soak.lines[-1]['step'] if soak.lines else 0}")
    unexplained = match_failures(soak.faults, summary, anomalies)
    landed(soak.faults, run_dir)
    recovered = sum(1 for f in soak.faults if f["recovered_at"] is not None)
    if recovered < len(soak.faults) and not any("not recovered" in x for x in anomalies):
        anomalies.append(f"{len(soak.faults) - recovered} fault(s) not recovered from before the run ended")
    if a.expect_faults and recovered < a.expect_faults:
        anomalies.append(f"only {recovered} fault(s) injected and recovered, --expect-faults {a.expect_faults}")
    curve = eval_curve(soak, summary)
    lost = summary["samples"]["lost"]

    by = {}
    for f in soak.faults:
        role = f["target"].rsplit("-", 1)[0]
        key = (f["kind"], role)
        by.setdefault(key, [0, 0, {}])
        by[key][0] += 1
        by[key][1] += f["recovered_at"] is not None
        by[key][2][f["landed"]] = by[key][2].get(f["landed"], 0) + 1
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    rec_times = sorted(f["recovered_at"] - f["at"] for f in soak.faults if f["recovered_at"])
    print(f"\nchaos_soak results (seed {a.seed}, {(time.time() - t0) / 60:.1f} min, run folder {run_dir})")
    print(f"  steps completed          {summary['steps_completed']} (metrics.jsonl: {len(soak.lines)} lines, "
          f"{sum(1 for l in soak.lines if l.get('redone'))} redone; highest step {top})")
    print(f"  faults injected          {len(soak.faults)}")
    for (kind, role), (n, ok, where) in sorted(by.items()):
        places = ", ".join(f"{k} {v}" for k, v in sorted(where.items()))
        print(f"    SIG{kind.upper():<5} {role:<8} {n:3d}, recovered {ok:3d}  (landed in: {places})")
    print(f"    aimed at checkpoint / weight sync / random: "
          f"{sum(f['moment'].startswith('checkpoint') for f in soak.faults)} / "
          f"{sum(f['moment'].startswith('weight_sync') for f in soak.faults)} / "
          f"{sum(f['moment'] == 'random' for f in soak.faults)}")
    for f in soak.faults:
        print(f"      {time.strftime('%H:%M:%S', time.localtime(f['at']))}.{int(f['at'] * 1000) % 1000:03d} step "
              f"{f['step']:5d} SIG{f['kind'].upper():<4} {f['target']:<10} aimed {f['moment']:<12} landed "
              f"{f['landed']:<15} detected {fmt(f.get('detected_after'))} s, recovered "
              f"{fmt(f['recovered_at'] - f['at'] if f['recovered_at'] else None)} s")
    print(f"  recovered                {recovered} of {len(soak.faults)}"
          + (f" (fault -> replaced and stepping again: median {rec_times[len(rec_times) // 2]:.1f} s, "
             f"max {rec_times[-1]:.1f} s)" if rec_times else ""))
    print(f"  restarts (summary.json)  trainer group {summary['trainer_restarts']}, rollout workers "
          f"{summary['worker_restarts']}; failures not injected by the soak: {len(unexplained)}")
    for u in unexplained:
        print(f"    {u.get('worker')}: {u.get('reason')}")
    s = summary["samples"]
    print(f"  samples                  dispatched {s['dispatched']}, trained {s['trained']}, discarded "
          f"{sum(s['discarded'].values())} {json.dumps(s['discarded'])}, cancelled {s['cancelled']}, "
          f"in flight at exit {s['in_flight_at_exit']}")
    print(f"  lost                     {lost}")
    print(f"  anomalies                {len(anomalies)}")
    for x in anomalies:
        print(f"    - {x}")
    end, first = curve["accuracy_at_end"], curve["accuracy_at_first_fault"]
    # rose past where the faults began, or held a solved task
    continued = end is not None and first is not None and (end > first or end >= first >= 0.9)
    print(f"  learning curve           held-out accuracy {fmt(curve['accuracy_before_rl'])} before RL, "
          f"{fmt(curve['accuracy_at_first_fault'])} at the first fault, {fmt(curve['accuracy_at_end'])} at the end; "
          f"reward (20 steps) {fmt(curve['reward_before_first_fault'])} -> {fmt(curve['reward_at_end'])}: "
          f"{'n/a (no faults)' if not soak.faults else 'continued' if continued else 'did NOT continue'}")
    result = {"seed": a.seed, "steps_completed": summary["steps_completed"], "faults": soak.faults,
              "recovered": recovered, "lost": lost, "anomalies": anomalies, "curve": curve,
              "continued": continued, "exit": summary["exit"], "unexplained_failures": unexplained}
    if a.sample_resources:
        result["resources"], result["files"] = resource_report(soak, t0, a.warmup_minutes * 60)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    if not a.keep and not (lost or anomalies):
        shutil.rmtree(base)
    elif not a.keep:
        print(f"  (run folder kept for inspection: {base})")
    return 1 if lost or anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
