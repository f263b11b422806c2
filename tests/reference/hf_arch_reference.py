#!/usr/bin/env python3
"""hf_arch_reference.py - references of tiny random Qwen3 / Llama 3.x / Gemma 3 / Qwen2 models from
HF transformers 5.x, for rlrun's tests of the architectures and config formats (issue 37).

Test references only: rlrun never runs this. Needs the venv of scripts/setup-python-ref.sh
build/pyref5 (PyPI torch 2.x + transformers 5.x, pinned in tests/python-ref5-requirements.txt).

Commands
  hf_arch_reference.py generate-set --out DIR
      every variant below into DIR/<variant> (the ctest fixture `hf_arch_reference_setup`)
  hf_arch_reference.py check-export --variant DIR/<variant> --export EXPORT_DIR
      loads EXPORT_DIR (an HF folder rlrun wrote) with this transformers and checks that it is the
      variant's model: same config fields that matter, same RoPE frequencies, same parameters, same
      log-probs (1e-5). With --logprobs-only (run under build/pyref's transformers 4.46 for Llama and
      Qwen2), only the log-probs against the 5.x reference. With --config-only (the export of a run,
      whose weights were trained), the config and RoPE, and parameters of the same names and shapes.

Variants (fp32, eager attention, hidden 64, 4 heads, 2 KV heads, vocab 96, max_position 128,
weights redrawn from torch.Generator(seed): norms 0.1 N (Gemma's (1 + w)) or 1 + 0.1 N, embeddings
0.5 N (Gemma 0.02 N), others 0.1 N (Gemma 0.4 N), so that greedy ids do not just repeat a token):
  qwen3           Qwen3, head_dim 32 (not 64 / 4), QK-norm, 3 layers
  llama3          Llama, rope_scaling llama3 (factor 4, original 16, low 1, high 4), head_dim 16
  llama_linear    Llama, linear factor 2
  llama_dynamic   Llama, dynamic factor 2 (the default RoPE within max_position_embeddings)
  llama_yarn      Llama, yarn factor 4, original 32
  qwen2_v5        Qwen2 with rope_theta 1e6 saved by transformers 5 (rope_parameters)
  gemma3          Gemma 3 text: head_dim 32, 4 layers [sliding, sliding, full, sliding], sliding
                  window 5, query_pre_attn_scalar 24, rope_local_base_freq 100, global linear x2,
                  tied embeddings, pad_token_id 0, eos [1, 7]
  gemma3_global   the same with every layer full attention (Gemma's layers without the window)
  gemma3_local    the same with every layer sliding: rlrun frees the KV blocks that fall out of
                  the window (docs/models.md); prompts of 14 tokens + 12 new cross it 2 blocks over
  run_qwen3, run_llama3, run_gemma3
                  model/ only: qwen3, llama3, gemma3 with vocab 512 (rlrun's built-in tokenizer), the
                  checkpoints of a short RL run whose export is checked (tests/orchestrator/run/run_archs_test.cc)

Output of a variant directory:
  model/               save_pretrained: config.json (5.x format), model.safetensors
  inputs.json          {"variant", "sequences": [[ids]...], "shared": {"system", "question",
                        "answers"} (segments a packed batch shares), "prompts": [[ids]...],
                        "max_new_tokens", "transformers_version", "torch_version"}
  outputs.safetensors  "logprobs.{s}": (T_s - 1,) log p(ids[t+1] | ids[<=t]) of sequences[s];
                       "shared_logprobs.{k}": the same for system + question + answers[k]
  grads.safetensors    d loss / d param (named_parameters names), loss = mean next-token NLL over
                       every predicted token of `sequences`
  greedy.json          {"ids": [[new ids]...]} greedy generate(max_new_tokens) of each prompt, no stop token
"""
import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
from safetensors.torch import save_file

COMMON = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
              vocab_size=96, max_position_embeddings=128, bos_token_id=1, eos_token_id=2,
              attn_implementation="eager")
LLAMA3 = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}


def variant_config(name):
    T = transformers
    if name.startswith("run_"):
        config = variant_config(name[len("run_"):])
        config.vocab_size = 512
        return config
    if name == "qwen3":
        return T.Qwen3Config(num_hidden_layers=3, head_dim=32, rope_theta=1e4, rms_norm_eps=1e-6, **COMMON)
    if name.startswith("llama"):
        rope = {"llama3": LLAMA3, "llama_linear": {"rope_type": "linear", "factor": 2.0},
                "llama_dynamic": {"rope_type": "dynamic", "factor": 2.0},
                "llama_yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}}[name]
        return T.LlamaConfig(num_hidden_layers=2, rope_theta=500.0, rms_norm_eps=1e-5,
                             rope_parameters=dict(rope, rope_theta=500.0), **COMMON)
    if name == "qwen2_v5":
        return T.Qwen2Config(num_hidden_layers=2, rope_theta=1e6, rms_norm_eps=1e-6, **COMMON)
    if name.startswith("gemma3"):
        common = dict(COMMON, eos_token_id=[1, 7], bos_token_id=2)
        types = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"]
        return T.Gemma3TextConfig(
            num_hidden_layers=4, head_dim=32, sliding_window=5, query_pre_attn_scalar=24,
            layer_types={"gemma3_global": ["full_attention"] * 4,
                         "gemma3_local": ["sliding_attention"] * 4}.get(name, types),
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}},
            pad_token_id=0, tie_word_embeddings=True, rms_norm_eps=1e-6, **common)
    raise ValueError(name)


VARIANTS = ("qwen3", "llama3", "llama_linear", "llama_dynamic", "llama_yarn", "qwen2_v5", "gemma3", "gemma3_global",
            "gemma3_local")
RUN_VARIANTS = ("run_qwen3", "run_llama3", "run_gemma3")


def make_model(name, gen):
    config = variant_config(name)
    model = transformers.AutoModelForCausalLM.from_config(config)
    gemma = config.model_type == "gemma3_text"
    with torch.no_grad():
        for pname, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in pname:
                p.copy_((0.0 if gemma else 1.0) + 0.1 * noise)
            elif "embed_tokens" in pname:  # Gemma's are scaled by sqrt(hidden) and tied: small, or greedy repeats
                p.copy_((0.02 if gemma else 0.5) * noise)
            else:
                p.copy_((0.4 if gemma else 0.1) * noise)
    return model.eval()


def logprobs_of(model, ids):
    input_ids = torch.tensor([ids], dtype=torch.long)
    logits = model(input_ids=input_ids, position_ids=torch.arange(len(ids)).unsqueeze(0), use_cache=False).logits[0]
    return torch.log_softmax(logits[:-1], dim=-1).gather(1, input_ids[0, 1:].unsqueeze(1)).squeeze(1)


def generate(out, name, seed):
    gen = torch.Generator().manual_seed(seed)
    model = make_model(name, gen)
    rand = lambda n: torch.randint(3, 96, (n,), generator=gen).tolist()  # never bos/eos/pad, but:
    pad_once = lambda ids: ids[:3] + [0] + ids[4:]  # one pad token (0): its embedding row gets no gradient
    sequences = [rand(7), pad_once(rand(12)), rand(19)]
    shared = {"system": rand(4), "question": rand(5), "answers": [rand(6), rand(3), rand(8)]}
    prompts = [rand(3), rand(9), rand(14)]
    max_new_tokens = 12
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(os.path.join(out, "model"), safe_serialization=True)

    outputs = {}
    total, count = 0.0, 0
    for s, ids in enumerate(sequences):
        lp = logprobs_of(model, ids)
        outputs[f"logprobs.{s}"] = lp.detach().contiguous()
        total = total - lp.sum()
        count += len(ids) - 1
    model.zero_grad()
    (total / count).backward()
    with torch.no_grad():
        for k, answer in enumerate(shared["answers"]):
            outputs[f"shared_logprobs.{k}"] = logprobs_of(model, shared["system"] + shared["question"] + answer)
    save_file(outputs, os.path.join(out, "outputs.safetensors"))
    save_file({n: p.grad.detach().clone().contiguous() for n, p in model.named_parameters()},
              os.path.join(out, "grads.safetensors"))
    greedy = []
    # No stop token (and no min_new_tokens, which would mask eos): plain argmax for max_new_tokens.
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        for prompt in prompts:
            ids = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=0)[0, len(prompt):].tolist()
            greedy.append(ids)
    with open(os.path.join(out, "greedy.json"), "w") as f:
        json.dump({"ids": greedy}, f)
    with open(os.path.join(out, "inputs.json"), "w") as f:
        json.dump({"variant": name, "seed": seed, "sequences": sequences, "shared": shared, "prompts": prompts,
                   "max_new_tokens": max_new_tokens, "transformers_version": transformers.__version__,
                   "torch_version": torch.__version__}, f, indent=1)


def check_export_logprobs(variant, export):
    """The export's log-probs under THIS transformers (e.g. 4.46.3 in build/pyref) against the 5.x reference."""
    from safetensors.torch import load_file
    got = transformers.AutoModelForCausalLM.from_pretrained(export, attn_implementation="eager",
                                                            torch_dtype=torch.float32).eval()
    want = load_file(os.path.join(variant, "outputs.safetensors"))
    with open(os.path.join(variant, "inputs.json")) as f:
        seqs = json.load(f)["sequences"]
    worst = 0.0
    with torch.no_grad():
        for s, ids in enumerate(seqs):
            worst = max(worst, (logprobs_of(got, ids) - want[f"logprobs.{s}"]).abs().max().item())
    ok = worst <= 1e-5
    print(f"check-export --logprobs-only {export}: {'ok' if ok else 'FAILED'} (transformers {transformers.__version__}, "
          f"max log-prob difference {worst:.3g})")
    return 0 if ok else 1


def check_export(variant, export, config_only=False):
    expected = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(variant, "model"),
                                                                 attn_implementation="eager").eval()
    got, info = transformers.AutoModelForCausalLM.from_pretrained(export, attn_implementation="eager",
                                                                  torch_dtype=torch.float32, output_loading_info=True)
    got.eval()
    problems = [f"{k}: {v}" for k, v in info.items() if v]
    if type(got) is not type(expected):
        problems.append(f"class {type(got).__name__}, expected {type(expected).__name__}")
    for field in ("head_dim", "layer_types", "sliding_window", "query_pre_attn_scalar", "tie_word_embeddings",
                  "rms_norm_eps", "num_key_value_heads", "pad_token_id", "eos_token_id", "max_position_embeddings"):
        a, b = getattr(expected.config, field, None), getattr(got.config, field, None)
        if a != b:
            problems.append(f"config {field}: {b!r}, expected {a!r}")
    # RoPE as computed (the written form may differ: 4.x keys vs rope_parameters, explicit yarn defaults)
    rot_e, rot_g = expected.model.rotary_emb, got.model.rotary_emb
    for name, buf in rot_e.named_buffers():
        if "inv_freq" in name and not torch.equal(buf, dict(rot_g.named_buffers())[name]):
            problems.append(f"RoPE {name} differs")
    for name, value in vars(rot_e).items():
        if "attention_scaling" in name and value != getattr(rot_g, name, None):
            problems.append(f"RoPE {name}: {getattr(rot_g, name, None)}, expected {value}")
    params = dict(expected.named_parameters())
    for n, p in got.named_parameters():
        if n not in params or p.shape != params[n].shape:
            problems.append(f"parameter {n} {tuple(p.shape)} is not one of the variant's")
        elif not config_only and not torch.equal(p.float(), params[n]):
            problems.append(f"parameter {n} differs")
    seqs = []
    if not config_only:
        with open(os.path.join(variant, "inputs.json")) as f:
            seqs = json.load(f)["sequences"]
    with torch.no_grad():
        for s, ids in enumerate(seqs):
            d = (logprobs_of(expected, ids) - logprobs_of(got, ids)).abs().max().item()
            if d > 1e-5:
                problems.append(f"log-probs of sequence {s} differ by {d:g}")
    if problems:
        print(f"check-export {export}: FAILED\n  " + "\n  ".join(problems))
        return 1
    print(f"check-export {export}: ok (transformers {transformers.__version__})")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("generate-set")
    s.add_argument("--out", required=True)
    c = sub.add_parser("check-export")
    c.add_argument("--variant", required=True)
    c.add_argument("--export", required=True)
    c.add_argument("--logprobs-only", action="store_true",
                   help="compare only log-probs with the 5.x reference (for transformers 4.x)")
    c.add_argument("--config-only", action="store_true",
                   help="compare the config, RoPE and parameter shapes, not the weights (a trained export)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # CI shares 2 cores; these models are tiny
    if args.command == "generate-set":
        for seed, name in enumerate(VARIANTS, start=11):
            generate(os.path.join(args.out, name), name, seed)
        for seed, name in enumerate(RUN_VARIANTS, start=41):
            model = make_model(name, torch.Generator().manual_seed(seed))
            model.save_pretrained(os.path.join(args.out, name, "model"), safe_serialization=True)
        return 0
    if args.logprobs_only:
        return check_export_logprobs(args.variant, args.export)
    return check_export(args.variant, args.export, args.config_only)


if __name__ == "__main__":
    sys.exit(main())
