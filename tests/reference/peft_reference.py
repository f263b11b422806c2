#!/usr/bin/env python3
"""peft_reference.py - LoRA references from HF peft over tiny random Qwen2 and Llama models, for
rlrun's LoRA tests (issue 38).

Test references only: rlrun never runs this. Needs the venv build/pyref5 (torch 2.x,
transformers 5.x, peft; tests/python-ref5-requirements.txt).

Commands
  peft_reference.py generate-set --out DIR
      every variant below into DIR/<variant> (the ctest fixture `peft_reference_setup`)
  peft_reference.py check-adapter --variant DIR/<variant> --adapter ADAPTER_DIR --ids IDS_JSON
      PeftModel.from_pretrained(the variant's base, ADAPTER_DIR) (an adapter folder rlrun wrote)
      generates greedily from each prompt of inputs.json; they must equal IDS_JSON's
      {"ids": [[new ids]...]} (what rlrun generated with the merged model). Exit 1 otherwise.

Variants (fp32, eager attention, hidden 64, 4 heads, 2 KV heads, vocab 96, 2 layers; base weights
0.1 N, norms 1 + 0.1 N, embeddings 0.5 N; A and B both 0.2 N from torch.Generator(seed), so that
neither half of the adapter is zero):
  qwen2       Qwen2 (q/k/v biases), tied embeddings, r 4, lora_alpha 8, every linear layer
  llama       Llama, r 8, lora_alpha 16, target_modules q_proj, v_proj, down_proj

Output of a variant directory:
  model/               the base: save_pretrained (config.json, model.safetensors)
  adapter/             PeftModel.save_pretrained: adapter_config.json, adapter_model.safetensors
  inputs.json          {"variant", "sequences": [[ids]...], "prompts": [[ids]...], "max_new_tokens", versions}
  outputs.safetensors  "logprobs.{s}": (T_s - 1,) log p(ids[t+1] | ids[<=t]) of sequences[s], adapters on
  grads.safetensors    d loss / d adapter tensor by PEFT's saved names (loss = mean next-token NLL over
                       every predicted token of `sequences`)
  greedy.json          {"ids": [[new ids]...]} greedy generate(max_new_tokens) of each prompt, no stop token
"""
import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import peft
import torch
import transformers
from safetensors.torch import save_file

COMMON = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, vocab_size=96,
              max_position_embeddings=128, num_hidden_layers=2, bos_token_id=1, eos_token_id=2,
              attn_implementation="eager")
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
VARIANTS = {
    "qwen2": (lambda: transformers.Qwen2Config(rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True, **COMMON),
              4, 8, ALL),
    "llama": (lambda: transformers.LlamaConfig(rope_theta=500.0, rms_norm_eps=1e-5, **COMMON),
              8, 16, ["q_proj", "v_proj", "down_proj"]),
}


def make_base(name, gen):
    model = transformers.AutoModelForCausalLM.from_config(VARIANTS[name][0]())
    with torch.no_grad():
        for pname, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            p.copy_(1.0 + 0.1 * noise if "norm" in pname else (0.5 if "embed_tokens" in pname else 0.1) * noise)
    return model.eval()


def logprobs_of(model, ids):
    input_ids = torch.tensor([ids], dtype=torch.long)
    logits = model(input_ids=input_ids, position_ids=torch.arange(len(ids)).unsqueeze(0), use_cache=False).logits[0]
    return torch.log_softmax(logits[:-1], dim=-1).gather(1, input_ids[0, 1:].unsqueeze(1)).squeeze(1)


def greedy_of(model, prompts, max_new_tokens):
    model.generation_config.eos_token_id = None  # no stop token: plain argmax for max_new_tokens
    out = []
    with torch.no_grad():
        for prompt in prompts:
            ids = model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=0)
            out.append(ids[0, len(prompt):].tolist())
    return out


def generate(out, name, seed):
    gen = torch.Generator().manual_seed(seed)
    base = make_base(name, gen)
    os.makedirs(out, exist_ok=True)
    base.save_pretrained(os.path.join(out, "model"), safe_serialization=True)
    _, r, alpha, targets = VARIANTS[name]
    model = peft.get_peft_model(base, peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0))
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "lora_" in pname:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float32))
    model.eval()
    model.save_pretrained(os.path.join(out, "adapter"), safe_serialization=True)

    rand = lambda n: torch.randint(3, 96, (n,), generator=gen).tolist()
    sequences = [rand(7), rand(12), rand(19)]
    prompts = [rand(3), rand(9), rand(14)]
    max_new_tokens = 12
    outputs, total, count = {}, 0.0, 0
    for s, ids in enumerate(sequences):
        lp = logprobs_of(model, ids)
        outputs[f"logprobs.{s}"] = lp.detach().contiguous()
        total = total - lp.sum()
        count += len(ids) - 1
    model.zero_grad()
    (total / count).backward()
    save_file(outputs, os.path.join(out, "outputs.safetensors"))
    save_file({n.replace(".default", ""): p.grad.detach().clone().contiguous()
               for n, p in model.named_parameters() if p.requires_grad}, os.path.join(out, "grads.safetensors"))
    with open(os.path.join(out, "greedy.json"), "w") as f:
        json.dump({"ids": greedy_of(model, prompts, max_new_tokens)}, f)
    with open(os.path.join(out, "inputs.json"), "w") as f:
        json.dump({"variant": name, "seed": seed, "sequences": sequences, "prompts": prompts,
                   "max_new_tokens": max_new_tokens, "r": r, "lora_alpha": alpha, "target_modules": targets,
                   "peft_version": peft.__version__, "transformers_version": transformers.__version__,
                   "torch_version": torch.__version__}, f, indent=1)


def check_adapter(variant, adapter, ids_path):
    base = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(variant, "model"),
                                                             attn_implementation="eager").eval()
    model = peft.PeftModel.from_pretrained(base, adapter).eval()
    with open(os.path.join(variant, "inputs.json")) as f:
        inputs = json.load(f)
    with open(ids_path) as f:
        want = json.load(f)["ids"]
    got = greedy_of(model, inputs["prompts"], max(len(w) for w in want))
    bad = [p for p, w in enumerate(want) if got[p][:len(w)] != w]
    if bad:
        print(f"check-adapter {adapter}: FAILED for prompts {bad}: peft {[got[p] for p in bad]}, "
              f"rlrun {[want[p] for p in bad]}")
        return 1
    print(f"check-adapter {adapter}: ok (peft {peft.__version__}, {len(want)} prompts)")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("generate-set")
    s.add_argument("--out", required=True)
    c = sub.add_parser("check-adapter")
    c.add_argument("--variant", required=True)
    c.add_argument("--adapter", required=True)
    c.add_argument("--ids", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.command == "generate-set":
        for i, name in enumerate(VARIANTS):
            generate(os.path.join(args.out, name), name, 38 + i)
        return 0
    return check_adapter(args.variant, args.adapter, args.ids)


if __name__ == "__main__":
    sys.exit(main())
