#!/usr/bin/env python3
"""hf_tokenize.py - HF transformers' AutoTokenizer on an HF model folder (test reference only).

  hf_tokenize.py MODEL_DIR --text TEXT [--text ...] [--chat MESSAGE ...]

Loads MODEL_DIR with AutoTokenizer and prints one JSON line: {"class": the tokenizer's class,
"ids": [input ids of each --text, no special tokens added], "chat_template": the template it
loaded, "chat": [{"text", "ids"} of apply_chat_template([{"role": "user", "content": MESSAGE}],
add_generation_prompt=True) for each --chat], "bos", "eos", "pad": special tokens}.
Runs in the venv of
scripts/setup-python-ref.sh; tests/orchestrator/cli/convert_cli_test.cc checks `rlrun convert`'s
folder with it.
"""
import argparse
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local files only

from transformers import AutoTokenizer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--text", action="append", default=[])
    parser.add_argument("--chat", action="append", default=[])
    args = parser.parse_args()
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    print(json.dumps({"class": type(tok).__name__,
                      "ids": [tok(t, add_special_tokens=False)["input_ids"] for t in args.text],
                      "chat_template": tok.chat_template,
                      "chat": [{"text": tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False),
                                "ids": tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True)}
                               for m in ([{"role": "user", "content": c}] for c in args.chat)],
                      "bos": tok.bos_token, "eos": tok.eos_token, "pad": tok.pad_token}))


if __name__ == "__main__":
    main()
