"""Writes SentencePiece-style BPE tokenizer.json files and their goldens with HF `tokenizers`, at
fetch time (scripts/fetch-test-models.sh), into MODELS/sp-tokenizers/:

  build/pyref/bin/python tests/engine/tokenizer/tokenizer_golden/make_sp_golden.py MODELS_DIR

No model hub is reachable, so the files are made the way HF makes them:
  sp_legacy/    a SentencePiece BPE model (byte_fallback) trained here on a fixed corpus, converted
                by transformers' convert_slow_tokenizer (LlamaTokenizer legacy=True: the Llama 2 / TinyLlama file,
                normalizer Prepend+Replace, decoder Replace/ByteFallback/Fuse/Strip)
  sp_metaspace/ the same model with legacy=False (Mistral / Gemma style: Metaspace pre-tokenizer,
                prepend_scheme "first")
  sp_no_prefix/ legacy=False, add_prefix_space=False (prepend_scheme "never")
  sp_metaspace_split/ sp_metaspace with a Metaspace decoder and pre-tokenizer (split, "always")
  sp_mixed_steps/ sp_metaspace edited to use the remaining steps (Strip, NFKC, Digits, Split before
                Metaspace, Strip decoder) and no byte fallback
  smollm2_gguf/ transformers' own conversion of the SmolLM2 GGUF's tokenizer (byte_fallback set,
                a Sequence decoder)
Each NAME/ holds tokenizer.json and golden.jsonl (the format of make_golden.py, whose texts it
reuses plus texts for byte fallback). The tokenizer files are generated, never committed; the
golden is made with them, so a retrained model can never disagree with its golden.
"""
import json
import os
import random
import shutil
import sys
import tempfile

import sentencepiece as spm
import transformers
from transformers.convert_slow_tokenizer import convert_slow_tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden  # noqa: E402

EXTRA = [
    "▁already▁has▁metaspace", "▁", "▁▁", "a▁b", " ▁ ", "<s>", "</s>", "<unk>", "<s>Hello</s>", "text<s>more",
    " <s> spaced </s> ", "<0x41>", "<0xZZ>", "ǅ ʬ ₿ ⌘ ✓ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀", "ĀāĂă Őő Ǻǻ", "ﷺ ﷽", "\u0000 nul \u0001",
    "Ünïcödé ŝţŕĩńġ", "カタカナ ひらがな 漢字", "ไทย भारत עברית العربية", "trailing newline\n", "\n leading newline",
    "end with space  ", "double  space", "x" * 300, "▁" * 10, "hello\u00a0world", "1 2 3 4 5 6 7 8 9 10",
]

CORPUS_WORDS = (
    "the quick brown fox jumps over the lazy dog hello world answer question model token language "
    "training reward policy gradient sample batch learning rate value function loss step epoch data "
    "return def int for while if else class import from print true false none self with as in is not "
    "café naïve résumé über straße 日本 中文 русский текст ελληνικά 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 "
    ". , ! ? ; : ( ) [ ] { } = + - * / < > ' \""
).split()


def train_model(tmp):
    rng = random.Random(7)
    lines = [" ".join(rng.choice(CORPUS_WORDS) for _ in range(rng.randint(3, 20))) for _ in range(3000)]
    lines += make_golden.FIXED[:40]
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(line for line in lines if line.strip() and "\n" not in line) + "\n")
    prefix = os.path.join(tmp, "sp")
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=prefix, model_type="bpe", vocab_size=600, byte_fallback=True,
        character_coverage=0.995, num_threads=1, seed_sentencepiece_size=100000, shuffle_input_sentence=False,
        split_digits=True, add_dummy_prefix=True, minloglevel=2)
    return prefix + ".model"


def save_tokenizer_json(tok, out_dir):
    tmp = tempfile.mkdtemp()
    tok.save_pretrained(tmp)
    os.makedirs(out_dir, exist_ok=True)
    shutil.copy(os.path.join(tmp, "tokenizer.json"), os.path.join(out_dir, "tokenizer.json"))
    shutil.rmtree(tmp)


def write_json(tok_json, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok_json)


def main():
    models = sys.argv[1]
    root = os.path.join(models, "sp-tokenizers")
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp()
    model_file = train_model(tmp)
    variants = {
        "sp_legacy": dict(legacy=True),
        "sp_metaspace": dict(legacy=False),
        "sp_no_prefix": dict(legacy=False, add_prefix_space=False),
    }
    for name, kwargs in variants.items():
        slow = transformers.LlamaTokenizer(vocab_file=model_file, **kwargs)
        tok_json = convert_slow_tokenizer(slow).to_str()
        write_json(tok_json, os.path.join(root, name))
        if name == "sp_metaspace":  # older Mistral / Gemma files: Metaspace both ways, split, "always"
            tok = json.loads(tok_json)
            tok["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                                    "split": True}
            tok["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                              "split": True}
            write_json(json.dumps(tok, ensure_ascii=False), os.path.join(root, "sp_metaspace_split"))
            # what no converted file here has: Strip and NFKC normalizers, Digits and a String Split
            # before Metaspace, a Metaspace decoder with "never", and no byte fallback (unk, fused)
            tok = json.loads(tok_json)
            tok["normalizer"] = {"type": "Sequence", "normalizers": [
                {"type": "Strip", "strip_left": False, "strip_right": True}, {"type": "NFKC"},
                {"type": "Replace", "pattern": {"String": "ab"}, "content": "b a"}]}
            tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "Split", "pattern": {"String": "\n"}, "behavior": "Isolated", "invert": False},
                {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}]}
            tok["decoder"] = {"type": "Sequence", "decoders": [
                {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": True},
                {"type": "Strip", "content": "x", "start": 2, "stop": 0}]}  # HF panics when start and stop cuts overlap
            tok["model"]["byte_fallback"] = False
            write_json(json.dumps(tok, ensure_ascii=False), os.path.join(root, "sp_mixed_steps"))
    gguf = os.path.join(models, "smollm2-135m-instruct.Q4_1.gguf")
    if os.path.exists(gguf):
        tok = transformers.AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(gguf)),
                                                         gguf_file=os.path.basename(gguf))
        save_tokenizer_json(tok, os.path.join(root, "smollm2_gguf"))
    shutil.rmtree(tmp)
    make_golden.FIXED += EXTRA
    for k, name in enumerate(sorted(os.listdir(root))):
        path = os.path.join(root, name, "tokenizer.json")
        if os.path.exists(path):
            golden = os.path.join(root, name, "golden.jsonl")
            make_golden.write_golden(name, path, golden, 250, 20 + k)
            with open(golden, encoding="utf-8") as f:  # the header names the file as under MODELS
                lines = f.readlines()
            header = json.loads(lines[0])
            header["tokenizer"] = f"build/models/sp-tokenizers/{name}/tokenizer.json"
            lines[0] = json.dumps(header, ensure_ascii=False) + "\n"
            with open(golden, "w", encoding="utf-8") as f:
                f.writelines(lines)


if __name__ == "__main__":
    main()
