#!/usr/bin/env python3
"""hf_generate.py - HF transformers' greedy generate on an HF model folder (test reference only).

  hf_generate.py MODEL_DIR --max-new-tokens N --stop-ids 0,2 --prompt-ids 1,2,3 [--prompt-ids ...]

Loads MODEL_DIR with AutoModelForCausalLM (fp32, eager attention), runs
generate(do_sample=False, max_new_tokens=N, eos_token_id=stop ids) once per --prompt-ids and
prints one JSON line: {"completions": [[ids of the new tokens, the stop token included], ...]}.
Runs in the venv of scripts/setup-python-ref.sh; the rlrun tests compare `rlrun generate
--temperature 0` against it (tests/orchestrator/cli/generate_cli_test.cc).
"""
import argparse
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local files only

import torch
import transformers.generation.utils
from transformers import AutoModelForCausalLM, GenerationConfig

# generate() asks whether the model is FSDP-wrapped by importing torch.distributed.fsdp, which fails
# on Debian's torch 1.13 under Python 3.11 (a dataclass with a mutable default). Not FSDP here.
transformers.generation.utils.is_fsdp_managed_module = lambda module: False


def ids(text):
    return [int(x) for x in text.split(",") if x != ""]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--max-new-tokens", type=int, required=True)
    parser.add_argument("--stop-ids", type=ids, default=[])
    parser.add_argument("--prompt-ids", type=ids, action="append", required=True)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, torch_dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    # A fresh config: nothing from the folder's generation_config.json (repetition penalties...).
    config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=args.max_new_tokens,
                              eos_token_id=args.stop_ids or None, pad_token_id=(args.stop_ids or [0])[0])
    completions = []
    with torch.no_grad():
        for prompt in args.prompt_ids:
            input_ids = torch.tensor([prompt], dtype=torch.long)
            out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config)
            completions.append(out[0, len(prompt):].tolist())
    print(json.dumps({"completions": completions}))


if __name__ == "__main__":
    main()
