#!/usr/bin/env python3
"""rlrun beside PyTorch / HF transformers on the real SmolLM2-135M-Instruct, in one run, on the same
cores and thread count (issue 21's table): training tokens/s (8 x 64 random tokens, causal LM loss,
backward, AdamW lr 1e-6, fp32) and generation tokens/s at batch 1, 8, 32, 64 (batch/8 random
48-token prompts, each sampled 8 times at temperature 1 with no top-k/top-p, exactly 16 new tokens),
with the ratio rlrun / reference, and each side's training GFLOP/s as a fraction of the sgemm bound
(rlrun's sgemm 1024^3, FLOPs per token = 6 x parameters + 6 x layers x seq_len x heads x head_dim,
as build/bench/bench_real_model counts them; torch's own sgemm is printed beside it). rlrun's
figures come from build/bench/bench_real_model, run with OMP_WAIT_POLICY=PASSIVE as every rlrun
worker process runs; the reference's from transformers' LlamaForCausalLM (eager attention on torch
1.13) and `generate`, which prefills every sample's copy of the prompt (rlrun shares it). Medians of
--reps after one warm-up each. Prints figures; never fails on time.

  build/pyref/bin/python bench/real_model.py [--threads 2] [--reps 3] [--skip-train] [--skip-generate]
                                             [--json] [--build build] [--bench PATH] [--model PATH.gguf]
                                             [--hf-dir DIR]
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GGUF_NAME = "smollm2-135m-instruct.Q4_1.gguf"
HF_DIR_NAME = "smollm2-135m-instruct"  # the same GGUF dequantized to fp32 (scripts/fetch-test-models.sh)
TRAIN_SEQS, TRAIN_LEN = 8, 64
BATCHES = (1, 8, 32, 64)
GROUP, PROMPT_LEN, NEW_TOKENS = 8, 48, 16


def fail(message):
    print(f"real_model: {message}", file=sys.stderr)
    sys.exit(1)


def log(message):
    print(f"  {message}", file=sys.stderr, flush=True)


def run_rlrun(bench, model, threads, reps, skip_train, skip_generate):
    """bench_real_model's `json:` line, as a dict; its other lines go to stderr as they come."""
    args = [bench, "--model", model, "--threads", str(threads), "--reps", str(reps)]
    args += ["--skip-train"] if skip_train else []
    args += ["--skip-generate"] if skip_generate else []
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found, lines = None, []
    for line in proc.stdout:
        lines.append(line.rstrip())
        if line.startswith("json: "):
            found = json.loads(line[len("json: "):])
        else:
            log(f"rlrun: {line.rstrip()}")
    if proc.wait() != 0 or found is None:
        fail(f"{' '.join(args)} exited with {proc.returncode}" + (f": {lines[-1]}" if lines else ""))
    return found


def median_seconds(fn, reps):
    """Median wall seconds of reps calls of fn, after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def torch_sgemm_gflops(torch, reps):
    n = 1024
    x, w = torch.randn(n, n), torch.randn(n, n)
    s = median_seconds(lambda: [torch.mm(x, w.t()) for _ in range(5)], reps)  # y = x w^T, as rlrun's
    return 5 * 2.0 * n ** 3 / s / 1e9


def load_reference(torch, hf_dir, gguf):
    from transformers import AutoModelForCausalLM
    t0 = time.perf_counter()
    if hf_dir:
        model = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    else:  # transformers dequantizes the GGUF itself (the `gguf` package), slower but the same file
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf),
                                                     torch_dtype=torch.float32)
    log(f"torch: loaded {hf_dir or gguf} in {time.perf_counter() - t0:.1f} s "
        f"(attention: {model.config._attn_implementation})")
    return model


def flops_per_token(model, seq_len):
    """bench_real_model's count: 6 x parameters (tied output layer once) + causal attention."""
    c = model.config
    params = sum(p.numel() for p in model.parameters())  # parameters() lists a tied tensor once
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return 6.0 * params + 6.0 * c.num_hidden_layers * seq_len * c.num_attention_heads * head_dim


def reference_train(torch, model, reps):
    """Seconds per step of forward + causal LM loss + backward + AdamW on 8 x 64 random tokens."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, model.config.vocab_size, (TRAIN_SEQS, TRAIN_LEN), generator=g)
    mask = torch.ones_like(ids)
    # weight_decay 0 as bench_real_model's optimizer; foreach: one fused update over all tensors
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0, foreach=True)
    model.train()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss  # shifted inside: 8 x 63 targets
        loss.backward()
        opt.step()

    s = median_seconds(step, reps)
    model.zero_grad(set_to_none=True)
    del opt
    return s


def reference_generate(torch, model, batch, reps):
    """Seconds of HF generate for batch/8 random prompts x 8 samples (or 1 x 1), 16 new tokens each."""
    model.eval()
    group = min(batch, GROUP)
    eos = model.generation_config.eos_token_id
    seed = [0]

    def gen():
        seed[0] += 1
        g = torch.Generator().manual_seed(11 + seed[0])
        prompts = torch.randint(3, model.config.vocab_size, (batch // group, PROMPT_LEN), generator=g)
        torch.manual_seed(seed[0])
        with torch.no_grad():
            out = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                                 temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=group,
                                 max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, use_cache=True,
                                 pad_token_id=eos)
        if tuple(out.shape) != (batch, PROMPT_LEN + NEW_TOKENS):  # every sample decodes all 16, as rlrun's
            fail(f"HF generate returned shape {tuple(out.shape)} at batch {batch}, "
                 f"expected {(batch, PROMPT_LEN + NEW_TOKENS)}")

    return median_seconds(gen, reps)


def run_reference(a, hf_dir, gguf):
    # torch's matmuls go to OpenBLAS (Debian's torch), whose threads torch.set_num_threads does not
    # set: OPENBLAS_NUM_THREADS must be in place before torch loads it.
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
    if a.torch_passive:  # read by libgomp when torch loads it
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local files only
    import torch
    import transformers.generation.utils
    # generate() asks whether the model is FSDP-wrapped by importing torch.distributed.fsdp, which
    # fails on Debian's torch 1.13 under Python 3.11 (as in tests/reference/hf_generate.py)
    transformers.generation.utils.is_fsdp_managed_module = lambda module: False
    torch.set_num_threads(a.threads)
    ref = {"torch": torch.__version__, "transformers": transformers.__version__, "threads": torch.get_num_threads(),
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)")}
    ref["sgemm_gflops"] = torch_sgemm_gflops(torch, a.reps)
    log(f"torch: sgemm 1024^3 f32: {ref['sgemm_gflops']:.1f} GFLOP/s")
    model = load_reference(torch, hf_dir, gguf)
    ref["flops_per_token"] = flops_per_token(model, TRAIN_LEN)
    if not a.skip_train:
        s = reference_train(torch, model, a.reps)
        tps = TRAIN_SEQS * TRAIN_LEN / s
        ref["train"] = {"step_s": s, "tokens_per_s": tps, "gflops": tps * ref["flops_per_token"] / 1e9}
        log(f"torch: training {TRAIN_SEQS} x {TRAIN_LEN}: {s:.3f} s/step, {tps:.1f} tokens/s")
    if not a.skip_generate:
        ref["generate"] = []
        for batch in BATCHES:
            s = reference_generate(torch, model, batch, a.reps)
            ref["generate"].append({"batch": batch, "seconds": s, "tokens_per_s": batch * NEW_TOKENS / s})
            log(f"torch: generate batch {batch}: {s:.3f} s, {batch * NEW_TOKENS / s:.1f} tokens/s")
    return ref


def print_table(rl, ref, load_before):
    print(f"SmolLM2-135M-Instruct, fp32, {rl['threads']} threads; rlrun (OMP_WAIT_POLICY=PASSIVE) vs "
          f"torch {ref['torch']} / transformers {ref['transformers']} (OMP_WAIT_POLICY {ref['omp_wait_policy']}); "
          f"load average before the run {load_before:.2f}")
    print(f"sgemm 1024^3 f32: rlrun {rl['sgemm_gflops']:.1f} GFLOP/s (the bound), torch {ref['sgemm_gflops']:.1f}")
    print(f"{'':<34} {'rlrun':>9} {'PyTorch/HF':>11} {'rlrun/ref':>10}")
    if "train" in rl:
        r, t = rl["train"]["tokens_per_s"], ref["train"]["tokens_per_s"]
        print(f"{'training tokens/s (8 x 64)':<34} {r:>9.1f} {t:>11.1f} {r / t:>9.2f}x")
        rg, tg, bound = rl["train"]["gflops"], ref["train"]["gflops"], rl["sgemm_gflops"]
        print(f"{'training GFLOP/s':<34} {rg:>9.1f} {tg:>11.1f}")
        print(f"{'  as a share of the sgemm bound':<34} {rg / bound:>9.0%} {tg / bound:>11.0%}")
        if max(rg, tg) > bound:  # the bound's 5 x 1024^3 takes a fraction of a second: easily hit by a neighbour
            print("  (above 100%: the sgemm figure was measured while something else had a core)")
    if "generate" in rl:
        for g, h in zip(rl["generate"]["batches"], ref["generate"]):
            r, t = g["tokens_per_s"], h["tokens_per_s"]
            label = f"generation tokens/s, batch {g['batch']}"
            print(f"{label:<34} {r:>9.1f} {t:>11.1f} {r / t:>9.2f}x")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--skip-generate", action="store_true")
    p.add_argument("--json", action="store_true", help="print one JSON object of everything at the end")
    p.add_argument("--torch-passive", action="store_true",
                   help="run torch with OMP_WAIT_POLICY=PASSIVE too (default: as a user runs it, libgomp's "
                   "spinning wait, which collapses when another process takes a core)")
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder (bench binary, models/)")
    p.add_argument("--bench", help="bench_real_model binary (default BUILD/bench/bench_real_model)")
    p.add_argument("--model", help=f"the GGUF both sides load (default BUILD/models/{GGUF_NAME})")
    p.add_argument("--hf-dir", help=f"the reference's HF folder of the same weights (default "
                   f"BUILD/models/{HF_DIR_NAME} if present, else transformers reads the GGUF)")
    a = p.parse_args()
    bench = a.bench or os.path.join(a.build, "bench", "bench_real_model")
    gguf = a.model or os.path.join(a.build, "models", GGUF_NAME)
    hf_dir = a.hf_dir or os.path.join(a.build, "models", HF_DIR_NAME)
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:  # checked before the minutes of rlrun's side
        fail(f"no {' or '.join(missing)} in {sys.executable}: run with the Python reference environment, "
             f"made by `bash scripts/setup-python-ref.sh`: build/pyref/bin/python bench/real_model.py")
    if not os.access(bench, os.X_OK):
        fail(f"no benchmark binary at {bench}: build it with `bash scripts/setup.sh` "
             f"(or `cmake --build build --target bench_real_model`), or name it with --bench")
    if not os.path.isfile(gguf):
        fail(f"no model at {gguf}: fetch it with `bash scripts/fetch-model.sh`, or name it with --model")
    if not os.path.isfile(os.path.join(hf_dir, "config.json")):
        if a.hf_dir:
            fail(f"{a.hf_dir} is not an HF model folder (no config.json); `bash scripts/fetch-test-models.sh` "
                 f"makes {HF_DIR_NAME}/ from the GGUF")
        hf_dir = None
    load_before = os.getloadavg()[0]
    rl = run_rlrun(bench, gguf, a.threads, a.reps, a.skip_train, a.skip_generate)
    ref = run_reference(a, hf_dir, gguf)
    if "train" in rl:  # the same count on both sides, or the shares of the bound are not comparable
        rl_fpt = rl["train"]["gflops"] * 1e9 / rl["train"]["tokens_per_s"]
        if abs(rl_fpt / ref["flops_per_token"] - 1) > 0.01:
            log(f"warning: FLOPs per token differ: rlrun {rl_fpt:.4g}, reference {ref['flops_per_token']:.4g}")
    print_table(rl, ref, load_before)
    if load_before > 0.5:  # one process of someone else's halves a 2-core machine for both sides unevenly
        print(f"note: the machine was not idle (load average {load_before:.2f} before the run); rerun when it is")
    if a.json:
        print(json.dumps({"rlrun": rl, "reference": ref, "load_average_before": load_before}))


if __name__ == "__main__":
    main()
