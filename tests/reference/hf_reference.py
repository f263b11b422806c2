#!/usr/bin/env python3
"""hf_reference.py - reference outputs of tiny random HF Llama/Qwen2 models, for rlrun's tests.

Test references only: rlrun never runs this. Needs the venv of scripts/setup-python-ref.sh
(transformers on Debian's torch 1.13, pinned in tests/python-ref-requirements.txt).

Commands
  hf_reference.py generate --out DIR --arch {llama,qwen2} --seed N [--tie]
      one variant into DIR (layout below)
  hf_reference.py generate-set --out DIR
      the standard variants: DIR/llama (untied, seed 1), DIR/llama_tied (tied, seed 2),
      DIR/qwen2 (untied, seed 3); this is what the ctest fixture `hf_reference_setup` runs
  hf_reference.py check-saved --check DIR/<variant> CKPT_DIR {float32,bfloat16} [--check ...]
      loads each CKPT_DIR (written by rlrun's save_hf_checkpoint, weights stored in that dtype)
      with transformers' from_pretrained and checks it against the reference: no missing or
      unexpected keys, every parameter equal to the reference model's (rounded to bf16 for
      bfloat16), and logits equal to the reference model's (with bf16-rounded weights for
      bfloat16) within 1e-5. Prints one line per checkpoint; exit 0 all ok, 1 a mismatch.

Model (fp32, eager attention): hidden 64, 2 layers, 4 heads, 2 KV heads (head_dim 16),
intermediate 128, vocab 96, max_position_embeddings 128, bos 1, eos 2; llama: rope_theta 10000,
rms_norm_eps 1e-5; qwen2: rope_theta 1e6, rms_norm_eps 1e-6 (q/k/v biases). Parameters are
re-drawn from a torch.Generator seeded with --seed so that logits are far from uniform:
norm weights 1 + 0.1 N(0,1), embeddings 0.5 N(0,1), all other weights and biases 0.1 N(0,1).

Inputs: two sequences of token ids (lengths 7 and 12, uniform in [0, 96), drawn from the same
generator), each run as its own batch of one with position_ids 0..T-1 (no padding, no packing).

Loss: mean next-token NLL over every predicted token of both sequences,
  loss = sum_s sum_{t=0}^{T_s-2} -log softmax(logits_s[t])[ids_s[t+1]] / sum_s (T_s - 1).

AdamW: torch.optim.AdamW(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1) on every
parameter (norms and biases included), 3 steps, each: zero_grad, loss on the same inputs,
backward, step. (torch 1.13 AdamW: decoupled decay p *= 1 - lr*wd before the Adam update;
bias-corrected moments; denominator sqrt(v_hat) + eps.)

Output layout of a variant directory (tensors are F32 safetensors, row-major):
  model/                   save_pretrained(safe_serialization=True): config.json,
                           generation_config.json, model.safetensors (HF parameter names; a tied
                           model stores no lm_head.weight)
  inputs.json              {"arch": "llama"|"qwen2", "seed": int, "tie_word_embeddings": bool,
                            "sequences": [[int, ...], ...], "position_ids": [[int, ...], ...],
                            "loss_definition": str,
                            "adamw": {"lr", "beta1", "beta2", "eps", "weight_decay", "steps": 3},
                            "transformers_version": str, "torch_version": str}
  reference.json           {"loss": float (initial mean NLL),
                            "losses": [float x 4] (loss before step 1, 2, 3 and after step 3),
                            "nll_sum": [float per sequence], "num_predicted": [int per sequence],
                            "param_stats": {name: {"shape": [...], "numel": int,
                                                   "sum": float, "abs_sum": float,
                                                   "first": [up to 8 floats, row-major]}}}
                           (param_stats describe the initial parameters, computed in float64,
                            so a loader can be checked without reading safetensors)
  outputs.safetensors      "logits.{s}": (T_s, 96) logits of sequence s;
                           "logprobs.{s}": (T_s - 1,) log p(ids_s[t+1] | ids_s[<=t]);
                           "input_ids.{s}": (T_s,) I64; "position_ids.{s}": (T_s,) I64
  grads.safetensors        d loss / d param for every parameter, under its HF name
                           (named_parameters(): a tied embedding appears once, as
                           model.embed_tokens.weight)
  adamw_step3.safetensors  every parameter after the 3 AdamW steps, under its HF name
"""
import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local files only: no hub is reachable here

import torch
import transformers
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

SEQ_LENS = (7, 12)
ADAMW = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "steps": 3}
STANDARD_SET = (("llama", "llama", 1, False), ("llama_tied", "llama", 2, True), ("qwen2", "qwen2", 3, False))


def make_config(arch, tie):
    common = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=128, vocab_size=96, max_position_embeddings=128, bos_token_id=1,
                  eos_token_id=2, tie_word_embeddings=tie, hidden_act="silu", attn_implementation="eager")
    if arch == "llama":
        return LlamaConfig(rope_theta=10000.0, rms_norm_eps=1e-5, **common)
    return Qwen2Config(rope_theta=1e6, rms_norm_eps=1e-6, use_sliding_window=False, **common)


def make_model(arch, tie, gen):
    config = make_config(arch, tie)
    model = (LlamaForCausalLM if arch == "llama" else Qwen2ForCausalLM)(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(0.5 * noise)
            else:
                p.copy_(0.1 * noise)
    model.eval()  # no dropout (all dropout probabilities are 0 anyway)
    return model


def forward(model, sequences):
    """Per-sequence logits, next-token log-probs, NLL sums and the mean loss (a graph node)."""
    logits_all, logprobs_all, nll_sums = [], [], []
    total, count = 0.0, 0
    for ids in sequences:
        input_ids = torch.tensor([ids], dtype=torch.long)
        position_ids = torch.arange(len(ids), dtype=torch.long).unsqueeze(0)
        logits = model(input_ids=input_ids, position_ids=position_ids, use_cache=False).logits[0]
        logp = torch.log_softmax(logits[:-1], dim=-1).gather(1, input_ids[0, 1:].unsqueeze(1)).squeeze(1)
        logits_all.append(logits)
        logprobs_all.append(logp)
        nll_sums.append(-logp.sum())
        total = total + (-logp.sum())
        count += len(ids) - 1
    return logits_all, logprobs_all, nll_sums, total / count


def param_stats(model):
    stats = {}
    for name, p in model.named_parameters():
        d = p.detach().double()
        stats[name] = {"shape": list(p.shape), "numel": p.numel(), "sum": d.sum().item(),
                       "abs_sum": d.abs().sum().item(), "first": p.detach().flatten()[:8].tolist()}
    return stats


def generate(out, arch, seed, tie):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = make_model(arch, tie, gen)
    sequences = [torch.randint(0, 96, (n,), generator=gen).tolist() for n in SEQ_LENS]
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(os.path.join(out, "model"), safe_serialization=True)
    stats = param_stats(model)

    logits, logprobs, nll_sums, loss = forward(model, sequences)
    model.zero_grad()
    loss.backward()
    outputs = {}
    for s, ids in enumerate(sequences):
        outputs[f"logits.{s}"] = logits[s].detach().contiguous()
        outputs[f"logprobs.{s}"] = logprobs[s].detach().contiguous()
        outputs[f"input_ids.{s}"] = torch.tensor(ids, dtype=torch.int64)
        outputs[f"position_ids.{s}"] = torch.arange(len(ids), dtype=torch.int64)
    save_file(outputs, os.path.join(out, "outputs.safetensors"))
    save_file({n: p.grad.detach().clone().contiguous() for n, p in model.named_parameters()},
              os.path.join(out, "grads.safetensors"))

    opt = torch.optim.AdamW(model.parameters(), lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]),
                            eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"])
    losses = []
    for _ in range(ADAMW["steps"]):
        opt.zero_grad()
        step_loss = forward(model, sequences)[3]
        losses.append(step_loss.item())
        step_loss.backward()
        opt.step()
    with torch.no_grad():
        losses.append(forward(model, sequences)[3].item())
    save_file({n: p.detach().clone().contiguous() for n, p in model.named_parameters()},
              os.path.join(out, "adamw_step3.safetensors"))

    inputs = {"arch": arch, "seed": seed, "tie_word_embeddings": tie, "sequences": sequences,
              "position_ids": [list(range(len(s))) for s in sequences],
              "loss_definition": "mean over all predicted tokens of -log p(ids[t+1] | ids[<=t])",
              "adamw": ADAMW, "transformers_version": transformers.__version__,
              "torch_version": torch.__version__}
    reference = {"loss": loss.item(), "losses": losses, "nll_sum": [x.item() for x in nll_sums],
                 "num_predicted": [len(s) - 1 for s in sequences], "param_stats": stats}
    with open(os.path.join(out, "inputs.json"), "w") as f:
        json.dump(inputs, f, indent=1)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)


def round_bf16_(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def check_saved(ref, saved, dtype):
    with open(os.path.join(ref, "inputs.json")) as f:
        inputs = json.load(f)
    cls = LlamaForCausalLM if inputs["arch"] == "llama" else Qwen2ForCausalLM
    expected_model = cls.from_pretrained(os.path.join(ref, "model"), torch_dtype=torch.float32,
                                         attn_implementation="eager").eval()
    got_model, info = cls.from_pretrained(saved, torch_dtype=torch.float32, attn_implementation="eager",
                                          output_loading_info=True)
    got_model.eval()
    problems = []
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            problems.append(f"{key}: {info[key]}")
    if dtype == "bfloat16":
        round_bf16_(expected_model)
    expected_params = dict(expected_model.named_parameters())
    for name, p in got_model.named_parameters():
        if name not in expected_params:
            problems.append(f"parameter {name} not in the reference model")
        elif not torch.equal(p, expected_params[name]):
            diff = (p - expected_params[name]).abs().max().item()
            problems.append(f"parameter {name} differs (max abs diff {diff:g})")
    with torch.no_grad():
        want = forward(expected_model, inputs["sequences"])[0]
        got = forward(got_model, inputs["sequences"])[0]
    for s, (w, g) in enumerate(zip(want, got)):
        diff = (w - g).abs().max().item()
        if diff > 1e-5:
            problems.append(f"logits of sequence {s} differ by {diff:g}")
    if problems:
        print(f"check-saved {saved}: FAILED\n  " + "\n  ".join(problems))
        return 1
    print(f"check-saved {saved}: ok ({dtype}, {sum(p.numel() for p in got_model.parameters())} parameters)")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--out", required=True)
    g.add_argument("--arch", choices=("llama", "qwen2"), required=True)
    g.add_argument("--seed", type=int, required=True)
    g.add_argument("--tie", action="store_true")
    s = sub.add_parser("generate-set")
    s.add_argument("--out", required=True)
    c = sub.add_parser("check-saved")
    c.add_argument("--check", required=True, nargs=3, action="append",
                   metavar=("REF_VARIANT_DIR", "CKPT_DIR", "DTYPE"))
    args = parser.parse_args()
    torch.set_num_threads(1)  # CI shares 2 cores; these models are tiny
    if args.command == "generate":
        generate(args.out, args.arch, args.seed, args.tie)
    elif args.command == "generate-set":
        for name, arch, seed, tie in STANDARD_SET:
            generate(os.path.join(args.out, name), arch, seed, tie)
    else:
        failures = 0
        for ref, saved, dtype in args.check:
            if dtype not in ("float32", "bfloat16"):
                parser.error(f"--check {ref} {saved} {dtype}: DTYPE must be float32 or bfloat16")
            failures += check_saved(ref, saved, dtype)
        return 1 if failures else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
