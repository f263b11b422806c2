#!/usr/bin/env python3
"""rlrun beside HF TRL's GRPOTrainer on the same workload, the same cores, the same day (issue 21's
headline): SmolLM2-135M-Instruct (fp32, the GGUF dequantized: build/models/smollm2-135m-instruct),
single-digit arithmetic asked in words in the chat template ("What is 7 times 8?"), 8 prompts x 8
samples per step, at most 16 new tokens, temperature 1, lr 1e-6, KL beta 0.04 (TRL 0.14's default;
rlrun: kl_coef), AdamW, grad clip 1, every group trained (rlrun: discard_group_zero_advantage
false, as TRL trains zero-spread groups too; compute_dtype its default, auto: bf16 products on a CPU
with AVX512_BF16 or AMX, fp32 elsewhere; --rlrun-set compute_dtype=fp32 pins it). Both sides read the same JSONL files this script
writes (rlrun: task.name jsonl): the same training prompts (each side draws them in its own
shuffled order), and 64 held-out problems never trained on,
scored greedily with the same rule (the last number in the answer, rlrun's `numeric`): each side by
its own evaluator (rlrun's rollout engine, HF generate), and both final models again by the same
HF evaluator in three precisions: fp32; bf16 products with fp32 activations (rlrun's compute_dtype:
bf16); and bf16 autocast (TRL's bf16=True trains, samples and, on the model it leaves, generates
under autocast, which also rounds every product's output: its answers there differ from the fp32
model's).

Seconds per RL step, the median (and mean) over the steps of each side: rlrun's step is its loop's
wait for a batch + train + weight sync (metrics.jsonl; generation overlaps training, and the first
step's wait is the first batch's generation), TRL's an optimizer step (generation, reference and
policy forward, backward, AdamW, in sequence). Prints both, the ratio of the medians, and one JSON
line. Never fails on time.

Needs TRL beside a current torch, in venvs of their own, made once. TRL runs at its best on CPU
with the newest TRL and torch, or with the older pair where that is faster (bench both; --trl-bf16
tries its bf16=True):
  python3 -m venv /tmp/trl-new
  /tmp/trl-new/bin/pip install torch==2.15.0 trl==1.16.0 peft==0.21.2 gguf "jinja2>=3.1"
  python3 -m venv /tmp/trl2
  /tmp/trl2/bin/pip install torch==2.5.1 trl==0.14.0 transformers==4.46.3 tokenizers==0.20.3 \
      accelerate==0.34.2 "datasets<3.3" "pandas<2.2" "pyarrow<16" "numpy<2" "jinja2>=3.1" gguf
(PyPI's torch wheels pull the CUDA libraries too, 3-5 GB, unused here.)

  TRL_PYTHON=/tmp/trl-new/bin/python python3 bench/trl_grpo.py [--steps 30] [--threads 2]
      [--skip-rlrun] [--skip-trl] [--trl-bf16] [--rlrun-set KEY=VALUE ...] [--keep-run DIR]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HF_DIR = os.path.join(ROOT, "build", "models", "smollm2-135m-instruct")
GGUF = os.path.join(ROOT, "build", "models", "smollm2-135m-instruct.Q4_1.gguf")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def log(message):
    print(f"trl_grpo: {message}", file=sys.stderr, flush=True)


def write_data(a, folder):
    """train.jsonl (steps x 8 prompts) and test.jsonl (64 problems apart from them)."""
    import random
    rng = random.Random(a.seed)
    problems = [(x, y, op) for x in range(10) for y in range(10) for op in "+*"]
    rng.shuffle(problems)
    held, pool = problems[:64], problems[64:]

    def row(x, y, op):
        return {"prompt": f"What is {x} {'plus' if op == '+' else 'times'} {y}?",
                "answer": str(x + y if op == "+" else x * y)}
    train = [row(*rng.choice(pool)) for _ in range(a.steps * 8)]
    paths = {}
    for name, rows in (("train", train), ("test", [row(*p) for p in held])):
        paths[name] = os.path.join(folder, name + ".jsonl")
        with open(paths[name], "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return paths


def load_rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def workload_sets(a, data):
    return ["task.name=jsonl", f"task.dataset={data['train']}", f"task.eval_dataset={data['test']}",
            "task.reward=numeric", "task.accuracy=numeric", "prompts_batch_size_for_trainer=8", "group_size=8", "max_tokens=16", "learning_rate=1e-6",
            f"kl_coef={a.beta}", "temperature=1.0", "grad_clip=1.0", "discard_group_zero_advantage=false",
            f"number_of_steps={a.steps}", f"task.eval_every={a.steps}", "task.eval_size=64",
            "metrics_bind=127.0.0.1:0"] + a.rlrun_set


def run_rlrun(a, data, run_dir):
    args = [os.path.join(ROOT, "build", "rlrun"), "configs/smollm2-arithmetic.yaml", "--run-dir", run_dir]
    for s in workload_sets(a, data):
        args += ["--set", s]
    log("rlrun: " + " ".join(args[1:]))
    t0 = time.time()
    done = subprocess.run(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        log(f"rlrun exited {done.returncode}: {done.stderr[-2000:]}")
        sys.exit(1)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    # The loop's seconds per step (waiting for a batch, training, weight sync), every step; not
    # profile.json's, which leaves out steps trained with lent threads (balance_cpu_threads).
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    steps = [r["wait_seconds"] + r["train_seconds"] + r["weight_sync_seconds"] for r in rows]
    return {"seconds_per_step": statistics.median(steps), "mean_seconds_per_step": statistics.mean(steps),
            "steps": len(rows), "wall_seconds": time.time() - t0,
            "accuracy_before": summary["eval"]["accuracy_before"],
            "accuracy_after": summary["eval"]["accuracy_after"],
            "trainer_idle_fraction": summary.get("trainer_idle_fraction"),
            "rollout_idle_fraction": summary.get("rollout_idle_fraction")}


def last_number(text):
    found = NUMBER.findall(text.replace(",", ""))
    return found[-1] if found else None


def correct(completion, answer):
    got = last_number(completion)
    try:
        return got is not None and float(got) == float(answer)
    except ValueError:
        return False


PRECISIONS = ("fp32", "bf16_products", "bf16_autocast")


def bf16_products_model(model):
    """A copy of `model` that computes as rlrun's compute_dtype: bf16 does: every linear layer (the
    LM head too, untied from the embedding) multiplies the bf16 roundings of its weights and of its
    input with fp32 sums and an fp32 output; norms, embedding rows, attention and the residual
    stream stay fp32. (Autocast also rounds each product's output and runs the rest in bf16.)"""
    import copy
    import torch
    m = copy.deepcopy(model)
    if m.lm_head.weight is m.get_input_embeddings().weight:
        m.lm_head.weight = torch.nn.Parameter(m.lm_head.weight.detach().clone())
    for module in m.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight.data = module.weight.data.bfloat16().float()
            module.register_forward_pre_hook(lambda mod, args: (args[0].bfloat16().float(),) + tuple(args[1:]))
    return m


def hf_accuracy(model, tokenizer, rows, precision="fp32"):
    """Greedy held-out accuracy of an HF model (16 new tokens, the same rule as rlrun's `numeric`),
    in one of PRECISIONS: fp32, bf16 products with fp32 activations (rlrun's compute_dtype: bf16),
    or under bf16 autocast (what TRL's bf16=True leaves on the model's forward)."""
    import contextlib
    import torch
    if precision == "bf16_products":
        model = bf16_products_model(model)
    was_training = model.training
    model.eval()
    hits = 0
    mode = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16_autocast" else contextlib.nullcontext()
    with torch.no_grad(), mode:
        for i in range(0, len(rows), 16):
            chunk = rows[i:i + 16]
            texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                                   add_generation_prompt=True) for q, _ in chunk]
            enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
            out = model.generate(**enc, max_new_tokens=16, do_sample=False, pad_token_id=tokenizer.pad_token_id)
            for (q, ans), ids in zip(chunk, out[:, enc["input_ids"].shape[1]:]):
                hits += correct(tokenizer.decode(ids, skip_special_tokens=True), ans)
    model.train(was_training)
    return hits / max(1, len(rows))


def hf_tokenizer():
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(GGUF), gguf_file=os.path.basename(GGUF))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def hf_eval_side(a, model_dir, test):
    """rlrun's exported model scored by the same HF evaluator as TRL's, in fp32 and bf16 autocast."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    dtype_key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    model = AutoModelForCausalLM.from_pretrained(model_dir, **{dtype_key: torch.float32})
    rows = [(r["prompt"], r["answer"]) for r in load_rows(test)]
    tokenizer = hf_tokenizer()
    return {p: hf_accuracy(model, tokenizer, rows, p) for p in PRECISIONS}


def trl_side(a, data):
    import torch
    import transformers
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    # generate() asks whether the model is FSDP-wrapped by importing torch.distributed.fsdp, which
    # fails on Debian's torch 1.13 under Python 3.11 (a dataclass with a mutable default). Not FSDP here.
    transformers.generation.utils.is_fsdp_managed_module = lambda module: False
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tokenizer = hf_tokenizer()
    dtype_key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    model = AutoModelForCausalLM.from_pretrained(HF_DIR, **{dtype_key: torch.float32})

    eval_rows = [(r["prompt"], r["answer"]) for r in load_rows(data["test"])]
    train = [{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]}
             for r in load_rows(data["train"])]

    def accuracy(precision="fp32"):
        return hf_accuracy(model, tokenizer, eval_rows, precision)

    def reward(prompts, completions, answer, **kwargs):
        return [1.0 if correct(c[0]["content"], ans) else 0.0 for c, ans in zip(completions, answer)]

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.times, self.t0 = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.t0)
            log(f"TRL step {len(self.times)}/{a.steps}: {self.times[-1]:.1f} s")

    before = accuracy()
    log(f"TRL: held-out accuracy before {before:.3f}")
    with tempfile.TemporaryDirectory(prefix="rlrun_trl_") as out:
        import dataclasses
        fields = {f.name for f in dataclasses.fields(GRPOConfig)}
        # One optimizer step = 8 prompts x 8 samples on every TRL version. TRL 0.14 counts prompts in
        # per_device_train_batch_size and defaults to 8 gradient accumulation steps (a step callback
        # would then time 1 of 8 micro-batches); TRL >= 0.15 counts completions, and newer ones
        # generate generation_batch_size of them per optimizer step.
        sizes = dict(per_device_train_batch_size=8, gradient_accumulation_steps=1)
        if "generation_batch_size" in fields:
            sizes = dict(per_device_train_batch_size=64, gradient_accumulation_steps=1, generation_batch_size=64)
        extra = dict(max_prompt_length=192) if "max_prompt_length" in fields else {}
        # TRL >= 1.0 turns gradient checkpointing on by default (memory for compute: ~1/3 more
        # per step); a 135M model needs no memory saved, and rlrun's side does not checkpoint.
        if "gradient_checkpointing" in fields:
            extra["gradient_checkpointing"] = False
        config = GRPOConfig(output_dir=out, learning_rate=1e-6, num_generations=8, max_completion_length=16,
                            temperature=1.0, beta=a.beta, max_grad_norm=1.0, max_steps=a.steps, logging_steps=1,
                            save_strategy="no", report_to="none", seed=a.seed, use_cpu=True, bf16=a.trl_bf16,
                            dataloader_num_workers=0, **sizes, **extra)
        times = StepTimes()
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=Dataset.from_list(train),
                              processing_class=tokenizer, callbacks=[times])
        model = trainer.model
        trainer.train()
        # bf16=True leaves the model's forward wrapped in bf16 autocast; the fp32 model is scored
        # without it, and both sides' final models in fp32 and under bf16 autocast alike.
        model = trainer.accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    hf_after = {p: accuracy(p) for p in PRECISIONS}
    after = hf_after["bf16_autocast"] if a.trl_bf16 else hf_after["fp32"]  # its own evaluator's
    log(f"TRL: held-out accuracy after: " + ", ".join(f"{v:.3f} ({p})" for p, v in hf_after.items()))
    import trl
    return {"seconds_per_step": statistics.median(times.times), "mean_seconds_per_step": statistics.mean(times.times),
            "steps": len(times.times), "accuracy_before": before, "accuracy_after": after,
            "hf_accuracy_after": hf_after,
            "versions": f"TRL {trl.__version__}, transformers {transformers.__version__}, torch {torch.__version__}"
                        + (", bf16" if a.trl_bf16 else "")}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--skip-rlrun", action="store_true")
    p.add_argument("--skip-trl", action="store_true")
    p.add_argument("--rlrun-set", action="append", default=[])
    p.add_argument("--trl-bf16", action="store_true", help="TRL's bf16=True (autocast on CPU)")
    p.add_argument("--keep-run", metavar="DIR", help="rlrun's run folder (kept; default: a temporary one)")
    p.add_argument("--trl-side", help=argparse.SUPPRESS)  # internal: run TRL in this interpreter
    p.add_argument("--hf-eval", nargs=2, help=argparse.SUPPRESS)  # internal: MODEL_DIR TEST_JSONL
    a = p.parse_args()
    if a.hf_eval:
        print("json: " + json.dumps(hf_eval_side(a, *a.hf_eval)))
        return
    if a.trl_side:
        folder = a.trl_side
        result = trl_side(a, {"train": os.path.join(folder, "train.jsonl"), "test": os.path.join(folder, "test.jsonl")})
        print("json: " + json.dumps(result))
        return
    for path in (HF_DIR, GGUF):
        if not os.path.exists(path):
            log(f"no model at {path}: run `bash scripts/setup.sh --test` (scripts/fetch-test-models.sh)")
            sys.exit(1)
    results = {}
    with tempfile.TemporaryDirectory(prefix="rlrun_bench_trl_") as tmp:
        data = write_data(a, tmp)
        python = os.environ.get("TRL_PYTHON", sys.executable)
        if not a.skip_rlrun:
            run_dir = a.keep_run or os.path.join(tmp, "rlrun")
            results["rlrun"] = run_rlrun(a, data, run_dir)
            # Its exported model through TRL's evaluator (HF generate), fp32 and bf16 autocast.
            done = subprocess.run([python, os.path.abspath(__file__), "--hf-eval", os.path.join(run_dir, "model"),
                                   data["test"], "--threads", str(a.threads)], stdout=subprocess.PIPE, text=True)
            line = [l for l in done.stdout.splitlines() if l.startswith("json: ")]
            if done.returncode == 0 and line:
                results["rlrun"]["hf_accuracy_after"] = json.loads(line[-1][6:])
            else:
                log(f"HF could not score rlrun's exported model (exit {done.returncode}); TRL_PYTHON={python}")
            log(f"rlrun: {results['rlrun']}")
        if not a.skip_trl:
            args = [python, os.path.abspath(__file__), "--trl-side", tmp, "--steps", str(a.steps),
                    "--threads", str(a.threads), "--beta", str(a.beta), "--seed", str(a.seed)]
            if a.trl_bf16:
                args.append("--trl-bf16")
            done = subprocess.run(args, stdout=subprocess.PIPE, text=True)
            line = [l for l in done.stdout.splitlines() if l.startswith("json: ")]
            if done.returncode != 0 or not line:
                log(f"the TRL side failed (exit {done.returncode}); TRL_PYTHON={python}")
                sys.exit(1)
            results["trl"] = json.loads(line[-1][6:])
    print(f"SmolLM2-135M, 8 prompts x 8 samples, <= 16 new tokens, lr 1e-6, beta {a.beta}, {a.steps} steps, "
          f"{a.threads} threads, {os.cpu_count()} cores")
    version = subprocess.run([os.path.join(ROOT, "build", "rlrun"), "version"], stdout=subprocess.PIPE, text=True)
    print("host: " + version.stdout.strip().splitlines()[-1])
    if "trl" in results:
        print("TRL side: " + results["trl"]["versions"])
    print("after: each side's own evaluator; then both final models by one HF evaluator in fp32, with "
          "bf16 products (rlrun's compute_dtype: bf16) and under bf16 autocast (TRL's bf16=True)")
    print(f"{'':26}{'s/step (median)':>16}{'(mean)':>8}{'accuracy before':>18}{'after':>8}"
          f"{'HF fp32':>9}{'HF bf16 prod':>13}{'HF autocast':>12}")
    for name, r in results.items():
        hf = r.get("hf_accuracy_after", {})
        print(f"{name:26}{r['seconds_per_step']:>16.2f}{r['mean_seconds_per_step']:>8.2f}"
              f"{r['accuracy_before']:>18.3f}{r['accuracy_after']:>8.3f}"
              f"{hf.get('fp32', float('nan')):>9.3f}{hf.get('bf16_products', float('nan')):>13.3f}"
              f"{hf.get('bf16_autocast', float('nan')):>12.3f}")
    if "rlrun" in results and "trl" in results:
        results["speedup"] = results["trl"]["seconds_per_step"] / results["rlrun"]["seconds_per_step"]
        print(f"rlrun is {results['speedup']:.2f}x faster per RL step than TRL's GRPOTrainer (median step)")
    print("json: " + json.dumps(results))


if __name__ == "__main__":
    main()
