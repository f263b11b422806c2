#!/usr/bin/env python3
"""rlrun beside PyTorch / HF transformers (and PEFT, and llama.cpp) on a real model, in one run, on
the same cores and thread count (issue 21's table; issue 38 part 4 at Qwen2.5's 0.5B): training
tokens/s (8 x 64 random tokens, causal LM loss, backward, AdamW, fp32) in full fine-tuning and with
LoRA (rank --lora, alpha --lora-alpha, on --lora-targets; PEFT's LoraConfig on the reference side,
AdamW over the adapters only), and generation tokens/s at batch 1, 8, 32, 64 (batch/8 random
48-token prompts, each sampled 8 times at temperature 1 with no top-k/top-p, exactly 16 new tokens),
with the ratio rlrun / reference, and each side's training GFLOP/s as a fraction of the sgemm bound
(rlrun's sgemm 1024^3, FLOPs per token = 6 x parameters of products (an untied embedding table is a
lookup) + 6 x layers x seq_len x heads x head_dim, as build/bench/bench_real_model counts them; torch's own sgemm is printed beside it). At batch 1
generation is also set beside llama.cpp through llama-cpp-python on the same GGUF file, when
--llama-cpp-python names a Python that has it (skipped, saying so, otherwise).
rlrun's figures come from build/bench/bench_real_model, run with OMP_WAIT_POLICY=PASSIVE as every
rlrun worker process runs; the reference's from transformers' AutoModelForCausalLM and `generate`,
which prefills every sample's copy of the prompt (rlrun shares it). The sides run one after
another, never together (full fine-tuning of 0.5B in fp32 takes ~8 GB a side); the load average
before each is printed with it. Medians of --reps after one warm-up each. Prints figures; never
fails on time.

  build/pyref5/bin/python bench/real_model.py [--model smollm2|qwen2.5-coder|PATH.gguf] [--hf-dir DIR]
      [--threads 2] [--reps 3] [--lora 16] [--lora-alpha 32] [--lora-targets all]
      [--llama-cpp-python /tmp/llamacpp/bin/python] [--skip-train] [--skip-generate]
      [--torch-passive] [--json] [--build build] [--bench PATH]

PEFT needs build/pyref5 (torch 2, transformers 5, peft); under build/pyref (torch 1.13, no peft)
the LoRA row has rlrun's figure alone. llama-cpp-python: `python3 -m venv /tmp/llamacpp &&
/tmp/llamacpp/bin/pip install llama-cpp-python==0.3.36` (builds llama.cpp, ~12 minutes on 2 cores).
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
# --model NAME: (GGUF file under BUILD/models, HF folder of the same weights dequantized to fp32 there
# or None: transformers dequantizes the GGUF itself, the `gguf` package, ~10 s at 0.5B)
MODELS = {
    "smollm2": ("smollm2-135m-instruct.Q4_1.gguf", "smollm2-135m-instruct"),  # scripts/fetch-test-models.sh
    "qwen2.5-coder": ("qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf", None),  # scripts/fetch-model.sh
}
TRAIN_SEQS, TRAIN_LEN = 8, 64
BATCHES = (1, 8, 32, 64)
GROUP, PROMPT_LEN, NEW_TOKENS = 8, 48, 16
ALL_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # --lora-targets all


def fail(message):
    print(f"real_model: {message}", file=sys.stderr)
    sys.exit(1)


def log(message):
    print(f"  {message}", file=sys.stderr, flush=True)


def run_rlrun(bench, model, threads, reps, skip_train, skip_generate, extra=()):
    """bench_real_model's `json:` line, as a dict; its other lines go to stderr as they come."""
    args = [bench, "--model", model, "--threads", str(threads), "--reps", str(reps)]
    args += ["--skip-train"] if skip_train else []
    args += ["--skip-generate"] if skip_generate else []
    args += list(extra)
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
    import transformers
    from transformers import AutoModelForCausalLM
    # transformers 5 renamed torch_dtype to dtype
    dtype = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype": torch.float32}
    t0 = time.perf_counter()
    if hf_dir:
        model = AutoModelForCausalLM.from_pretrained(hf_dir, **dtype)
    else:  # transformers dequantizes the GGUF itself (the `gguf` package), slower but the same file
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf), **dtype)
    log(f"torch: loaded {hf_dir or gguf} in {time.perf_counter() - t0:.1f} s "
        f"(attention: {model.config._attn_implementation})")
    return model


def flops_per_token(model, seq_len):
    """bench_real_model's count: 6 x the parameters of products (all but an untied embedding table,
    a lookup; tied, it is the output layer) + causal attention."""
    c = model.config
    params = sum(p.numel() for p in model.parameters())  # parameters() lists a tied tensor once
    embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    if embed is not head:
        params -= embed.numel()
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return 6.0 * params + 6.0 * c.num_hidden_layers * seq_len * c.num_attention_heads * head_dim


def reference_train(torch, model, reps, lr=1e-6):
    """Seconds per step of forward + causal LM loss + backward + AdamW on 8 x 64 random tokens, over
    the parameters that require a gradient (all of them, or a PEFT model's adapters)."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, model.config.vocab_size, (TRAIN_SEQS, TRAIN_LEN), generator=g)
    mask = torch.ones_like(ids)
    # weight_decay 0 as bench_real_model's optimizer; foreach: one fused update over all tensors
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0,
                            foreach=True)
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
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos  # Qwen2.5 lists two
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


def reference_lora(torch, model, a):
    """PEFT's LoRA of the same rank, alpha and targets on `model` (wrapped in place: run last), trained as
    reference_train trains; None when this Python has no peft."""
    if importlib.util.find_spec("peft") is None:
        log(f"torch: no peft in {sys.executable}: the LoRA row has rlrun's figure alone (build/pyref5 has peft)")
        return None
    import peft
    targets = list(ALL_TARGETS) if a.lora_targets in ("all", "all-linear") else a.lora_targets.split(",")
    config = peft.LoraConfig(r=a.lora, lora_alpha=a.lora_alpha, target_modules=targets, lora_dropout=0.0,
                             bias="none", task_type="CAUSAL_LM")
    lora_model = peft.get_peft_model(model, config)
    trained = sum(p.numel() for p in lora_model.parameters() if p.requires_grad)
    s = reference_train(torch, lora_model, a.reps, lr=1e-4)
    tps = TRAIN_SEQS * TRAIN_LEN / s
    log(f"torch: PEFT {peft.__version__} LoRA rank {a.lora}: {s:.3f} s/step, {tps:.1f} tokens/s, "
        f"{trained} adapter parameters")
    return {"peft": peft.__version__, "step_s": s, "tokens_per_s": tps, "trained_params": trained}


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
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"), "load_average_before": os.getloadavg()[0]}
    ref["sgemm_gflops"] = torch_sgemm_gflops(torch, a.reps)
    log(f"torch: sgemm 1024^3 f32: {ref['sgemm_gflops']:.1f} GFLOP/s")
    model = load_reference(torch, hf_dir, gguf)
    ref["flops_per_token"] = flops_per_token(model, TRAIN_LEN)
    if not a.skip_generate:
        ref["generate"] = []
        for batch in BATCHES:
            s = reference_generate(torch, model, batch, a.reps)
            ref["generate"].append({"batch": batch, "seconds": s, "tokens_per_s": batch * NEW_TOKENS / s})
            log(f"torch: generate batch {batch}: {s:.3f} s, {batch * NEW_TOKENS / s:.1f} tokens/s")
    if not a.skip_train:
        s = reference_train(torch, model, a.reps)
        tps = TRAIN_SEQS * TRAIN_LEN / s
        ref["train"] = {"step_s": s, "tokens_per_s": tps, "gflops": tps * ref["flops_per_token"] / 1e9,
                        "trained_params": sum(p.numel() for p in model.parameters())}
        log(f"torch: training {TRAIN_SEQS} x {TRAIN_LEN}: {s:.3f} s/step, {tps:.1f} tokens/s")
        if a.lora > 0:  # last: PEFT wraps the model in place
            ref["train_lora"] = reference_lora(torch, model, a)
    return ref


def llama_cpp_side(gguf, threads, reps):
    """Runs under the llama-cpp-python venv (real_model.py --llama-cpp-side): batch-1 generation as
    bench_real_model's, a random 48-token prompt then exactly 16 tokens sampled at temperature 1 with no
    top-k/top-p/min-p, timed from the prompt's submission to the last token; prints one JSON line."""
    import random
    import llama_cpp
    llm = llama_cpp.Llama(model_path=gguf, n_threads=threads, n_threads_batch=threads,
                          n_ctx=PROMPT_LEN + NEW_TOKENS + 16, n_batch=PROMPT_LEN, seed=1, verbose=False)
    rng = random.Random(11)

    def gen():
        prompt = [rng.randrange(3, llm.n_vocab()) for _ in range(PROMPT_LEN)]
        n = 0  # generate() yields every sampled token, end-of-text included, until the caller stops
        for _ in llm.generate(prompt, temp=1.0, top_k=0, top_p=1.0, min_p=0.0, reset=True):
            n += 1
            if n == NEW_TOKENS:
                break

    s = median_seconds(gen, reps)
    print(json.dumps({"llama_cpp_python": llama_cpp.__version__, "seconds": s, "tokens_per_s": NEW_TOKENS / s,
                      "system_info": llama_cpp.llama_print_system_info().decode().strip()}))


def run_llama_cpp(python, gguf, threads, reps, passive):
    """llama_cpp_side's figures under `python`, or None (saying why) when it cannot run."""
    if not python:
        log("llama.cpp: skipped (no --llama-cpp-python)")
        return None
    if not os.access(python, os.X_OK):
        log(f"llama.cpp: skipped (no Python at {python})")
        return None
    if subprocess.run([python, "-c", "import llama_cpp"], capture_output=True).returncode != 0:
        log(f"llama.cpp: skipped ({python} cannot import llama_cpp: "
            f"`{os.path.dirname(python)}/pip install llama-cpp-python==0.3.36`)")
        return None
    load = os.getloadavg()[0]
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE") if passive else None  # llama.cpp's threads are OpenMP's
    proc = subprocess.run([python, os.path.abspath(__file__), "--llama-cpp-side", gguf, str(threads), str(reps)],
                          capture_output=True, text=True, env=env)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if proc.returncode != 0 or not lines:
        log(f"llama.cpp: skipped (it exited with {proc.returncode}: {proc.stderr.strip()[-500:]})")
        return None
    out = json.loads(lines[-1])
    out["load_average_before"] = load
    log(f"llama.cpp (llama-cpp-python {out['llama_cpp_python']}): generate batch 1: {out['seconds']:.3f} s, "
        f"{out['tokens_per_s']:.1f} tokens/s; {out['system_info']}")
    return out


def row(label, r, t, width=11):
    ratio = f"{r / t:>9.2f}x" if r and t else f"{'':>10}"
    return f"{label:<40} {r:>9.1f} " + (f"{t:>{width}.1f} " if t else f"{'-':>{width}} ") + ratio


def print_table(a, gguf, rl, rl_lora, ref, llama):
    name = os.path.basename(gguf)
    print(f"{name} dequantized to fp32 (llama.cpp: as it is), {rl['threads']} threads; rlrun "
          f"(OMP_WAIT_POLICY=PASSIVE) vs torch {ref['torch']} / transformers {ref['transformers']} "
          f"(OMP_WAIT_POLICY {ref['omp_wait_policy']})")
    print(f"host: {rl['host']}")
    def load(side):
        after = side.get("load_average_after")
        return f"{side['load_average_before']:.2f}" + (f"-{after:.2f}" if after is not None else "")
    loads = [f"rlrun {load(rl)}"] + ([f"rlrun LoRA {load(rl_lora)}"] if rl_lora else []) + [f"PyTorch {load(ref)}"]
    loads += [f"llama.cpp {load(llama)}"] if llama else []
    print(f"load average (1 min) before-after each side: {', '.join(loads)}; medians of {a.reps} repetitions")
    print(f"sgemm 1024^3 f32: rlrun {rl['sgemm_gflops']:.1f} GFLOP/s (the bound), torch {ref['sgemm_gflops']:.1f}")
    print(f"{'':<40} {'rlrun':>9} {'PyTorch/HF':>11} {'rlrun/ref':>10}")
    if "train" in rl:
        r, t = rl["train"]["tokens_per_s"], ref["train"]["tokens_per_s"]
        print(row(f"training tokens/s, full ({TRAIN_SEQS} x {TRAIN_LEN})", r, t))
        rg, tg, bound = rl["train"]["gflops"], ref["train"]["gflops"], rl["sgemm_gflops"]
        print(f"{'  GFLOP/s (share of rlrun sgemm)':<40} {f'{rg:.0f} ({rg / bound:.0%})':>9} "
              f"{f'{tg:.0f} ({tg / bound:.0%})':>11}")
        rp, tp = rl["train"].get("trained_params"), ref["train"]["trained_params"]
        if rp and rp != tp:  # e.g. a GGUF with its own output.weight, which transformers ties to the embedding
            print(f"  (parameters AdamW updates differ: rlrun {rp / 1e6:.1f}M, PyTorch {tp / 1e6:.1f}M)")
    if rl_lora and "train" in rl_lora:
        peft = ref.get("train_lora")
        r = rl_lora["train"]["tokens_per_s"]
        print(row(f"training tokens/s, LoRA r{a.lora} (PEFT)", r, peft["tokens_per_s"] if peft else None))
        if peft and peft["trained_params"] != rl_lora["train"]["trained_params"]:
            print(f"  (adapter parameters differ: rlrun {rl_lora['train']['trained_params']}, "
                  f"PEFT {peft['trained_params']})")
    if "generate" in rl:
        for g, h in zip(rl["generate"]["batches"], ref["generate"]):
            print(row(f"generation tokens/s, batch {g['batch']}", g["tokens_per_s"], h["tokens_per_s"]))
        g1 = next((g for g in rl["generate"]["batches"] if g["batch"] == 1), None)
        if g1 and llama:
            print(f"{'':<40} {'rlrun':>9} {'llama.cpp':>11} {'rlrun/ref':>10}")
            print(row(f"generation tokens/s, batch 1", g1["tokens_per_s"], llama["tokens_per_s"]) +
                  f"  (llama-cpp-python {llama['llama_cpp_python']})")
        elif g1:
            print("generation batch 1 vs llama.cpp: skipped (no --llama-cpp-python, or it cannot import llama_cpp)")


def resolve_model(a):
    """(gguf, hf_dir or None) from --model (a name of MODELS or a path) and --hf-dir."""
    if a.model in MODELS or a.model is None:
        gguf_name, hf_name = MODELS[a.model or "smollm2"]
        gguf = os.path.join(a.build, "models", gguf_name)
        hf_dir = os.path.join(a.build, "models", hf_name) if hf_name else None
    else:
        gguf, hf_dir = a.model, None
    if a.hf_dir:
        hf_dir = a.hf_dir
    if not os.path.isfile(gguf):
        fail(f"no model at {gguf}: fetch it with `bash scripts/fetch-model.sh`, or name it with --model")
    if hf_dir and not os.path.isfile(os.path.join(hf_dir, "config.json")):
        if a.hf_dir:
            fail(f"{a.hf_dir} is not an HF model folder (no config.json); `bash scripts/fetch-test-models.sh` "
                 f"makes {MODELS['smollm2'][1]}/ from SmolLM2's GGUF")
        hf_dir = None  # transformers reads the GGUF
    return gguf, hf_dir


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--llama-cpp-side":  # run_llama_cpp's child
        llama_cpp_side(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--skip-generate", action="store_true")
    p.add_argument("--lora", type=int, default=16, help="LoRA rank of the LoRA training row (0: no LoRA row)")
    p.add_argument("--lora-alpha", type=float, default=32)
    p.add_argument("--lora-targets", default="all",
                   help=f"PEFT's target_modules, comma-separated, or all ({','.join(ALL_TARGETS)})")
    p.add_argument("--llama-cpp-python", help="a Python with llama-cpp-python: the llama.cpp column at batch 1")
    p.add_argument("--json", action="store_true", help="print one JSON object of everything at the end")
    p.add_argument("--torch-passive", action="store_true",
                   help="run torch (and llama.cpp) with OMP_WAIT_POLICY=PASSIVE too (default: as a user runs "
                   "them, libgomp's spinning wait, which collapses when another process takes a core)")
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder (bench binary, models/)")
    p.add_argument("--bench", help="bench_real_model binary (default BUILD/bench/bench_real_model)")
    p.add_argument("--model", help=f"{' or '.join(MODELS)} (GGUF files under BUILD/models), or the path of a "
                   f"GGUF both sides load (default smollm2)")
    p.add_argument("--hf-dir", help="the reference's HF folder of the same weights (default: "
                   f"BUILD/models/{MODELS['smollm2'][1]} for smollm2 if present; else transformers reads the GGUF)")
    a = p.parse_args()
    bench = a.bench or os.path.join(a.build, "bench", "bench_real_model")
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:  # checked before the minutes of rlrun's side
        fail(f"no {' or '.join(missing)} in {sys.executable}: run with the Python reference environment, "
             f"made by `bash scripts/setup-python-ref.sh`: build/pyref5/bin/python bench/real_model.py")
    if not os.access(bench, os.X_OK):
        fail(f"no benchmark binary at {bench}: build it with `bash scripts/setup.sh` "
             f"(or `cmake --build build --target bench_real_model`), or name it with --bench")
    gguf, hf_dir = resolve_model(a)
    lora_args = ["--lora", str(a.lora), "--lora-alpha", str(a.lora_alpha), "--lora-targets", a.lora_targets]
    # one side at a time: rlrun full + generation, rlrun LoRA, PyTorch, llama.cpp
    load = os.getloadavg()[0]
    rl = dict(run_rlrun(bench, gguf, a.threads, a.reps, a.skip_train, a.skip_generate), load_average_before=load,
              load_average_after=os.getloadavg()[0])
    rl_lora = None
    if a.lora > 0 and not a.skip_train:
        load = os.getloadavg()[0]
        rl_lora = dict(run_rlrun(bench, gguf, a.threads, a.reps, False, True, lora_args), load_average_before=load,
                       load_average_after=os.getloadavg()[0])
    ref = run_reference(a, hf_dir, gguf)
    ref["load_average_after"] = os.getloadavg()[0]
    llama = run_llama_cpp(a.llama_cpp_python, gguf, a.threads, a.reps, a.torch_passive) if not a.skip_generate else None
    if llama:
        llama["load_average_after"] = os.getloadavg()[0]
    if "train" in rl:  # the same count on both sides, or the shares of the bound are not comparable
        rl_fpt = rl["train"]["gflops"] * 1e9 / rl["train"]["tokens_per_s"]
        if abs(rl_fpt / ref["flops_per_token"] - 1) > 0.01:
            log(f"warning: FLOPs per token differ: rlrun {rl_fpt:.4g}, reference {ref['flops_per_token']:.4g}")
    print_table(a, gguf, rl, rl_lora, ref, llama)
    if max(rl["load_average_before"], ref["load_average_before"]) > 0.5:
        # one process of someone else's halves a 2-core machine for both sides unevenly
        print("note: the machine was not idle (load averages above); the ratios are what this run compares")
    if a.json:
        print(json.dumps({"rlrun": rl, "rlrun_lora": rl_lora, "reference": ref, "llama_cpp": llama}))


if __name__ == "__main__":
    main()
