"""Writes the tokenizer golden files (<name>.jsonl beside this script) with HF `tokenizers`, the
reference implementation. Run under the test venv after scripts/fetch-test-models.sh:

  build/pyref/bin/python tests/engine/tokenizer/tokenizer_golden/make_golden.py [--models-dir build/models]

Line 1 of each file: {"tokenizer": path relative to the repo, "sha256": of that tokenizer.json,
"tokenizers_version": ...}. Then one case a line: {"text", "ids", "decoded", "decoded_skip"}
(ids as from encode(text, add_special_tokens=False); decoded with and without
skip_special_tokens) and, for some cases, "prefixes": decode(ids[:k]) for k = 1.. (partial
characters come out as U+FFFD). The texts are fixed strings plus seeded random mixes of
fragments, so a rerun with the same tokenizers version gives the same files.
"""
import argparse
import hashlib
import json
import os
import random

import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))

FIXED = [
    "", " ", "  ", "\n", "\t", "Hello world", "Hello, world!", " leading space", "trailing space ",
    "multiple    spaces   between", "tabs\tand\ttabs\t\t", "new\nlines\n\n\nmany", "windows\r\nline\r\nends",
    "   \n  \t mixed whitespace \n ", "don't I'll we've they're she's it'd I'M WE'LL", "'s 't 're",
    "café naïve résumé façade Zürich", "e\u0301 (combining acute) vs \u00e9", "Ελληνικά κείμενο", "русский текст",
    "日本語のテキストです。", "中文文本，测试。", "한국어 텍스트", "emoji 👍 👍🏽 👨‍👩‍👧 🎉🎉", "🙂", "\u200b zero width",
    "non\u00a0breaking\u00a0space", "ideographic\u3000space", "ﬁ ligature ＡＢＣ full width ① ㎏ ½", "Ⅻ roman",
    "0", "7", "42", "12345", "3.14159", "1,000,000", "-42 + 17 = -25", "12345678901234567890123456789",
    "2024-06-01T12:34:56Z", "0x1F 0b1010 1e-9", "٣٤٥ arabic-indic digits", "What is 37 * 48?",
    "def f(x):\n    return x * 2\n", "int main() { return 0; }", '{"key": [1, 2, 3], "b": null}',
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}", "x=1;y=2;z=x+y", "#include <vector>",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n", "<|endoftext|>", "<|im_end|><|im_end|>",
    "text<|endoftext|>more text", " <|im_start|> spaced ", "<|im_start", "im_end|>", "<|im_start|x",
    "<|endoftext|><|im_start|>user<|im_end|>", "a" * 200, " " * 50, "\n" * 20, "ab" * 100,
    "Reverse the string 'hello' -> 'olleh'.", "Sort: 5, 3, 9, 1 → 1, 3, 5, 9",
    "Mixed 中文 and English, с русским 123 и emoji 🎉.", "punctuation!!! ??? ... --- ***", "$$$ %%% ^^^ &&&",
    "URL: https://example.com/path?q=1&r=2#frag", "email: someone@example.org",
]

FRAGMENTS = [
    "the", "The", " quick", " brown", " fox", "jumps", " over", " lazy", " dog", "Hello", "world", "answer",
    " ", "  ", "   ", "\n", "<tool>", " <tool> ", "answer", " answer ", "xanswer", "é!", "e\u0301!", "x", "aeiou", "\n\n", "\t", " \n", "\r\n", ".", ",", "!", "?", "'s", "'ll", "-", "_", "/", "(", ")",
    "0", "1", "7", "42", "123", "2024", "3.5", "99999", "1000000", "007",
    "é", "ñ", "ü", "ß", "ø", "日本", "中文", "한국", "ω", "Ж", "ﬁ", "Ａ", "①", "👍", "🎉", "👨‍👩‍👧", "\u0301",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "user", "assistant", "system", "<", "|", ">",
    "def", " return", " x", "=", "+", "*", "==", "{", "}", "[", "]", ";", ":", "\"", "'",
]


def random_texts(count, seed):
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        n = rng.randint(1, 12)
        texts.append("".join(rng.choice(FRAGMENTS) for _ in range(n)))
    return texts


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def added(id_, content, **flags):
    token = {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": False}
    token.update(flags)
    return token


# Variants of tiny.json that exercise what the real files here do not: Split with a regex and every
# behaviour, NFC/NFKC, ByteLevel without regex or with add_prefix_space, ignore_merges, and added
# tokens with lstrip/rstrip/single_word/normalized. "overrides" replace top-level keys of tiny.json;
# "model_overrides" keys of its model. The C++ test applies the same overrides.
def variants(tiny):
    specials = tiny["added_tokens"]
    n = len(tiny["model"]["vocab"])  # HF numbers new added tokens from the vocab size on
    return {
        "tiny_split": {
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}]},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
            "added_tokens": specials + [
                added(n, "<tool>", lstrip=True, rstrip=True),
                added(n + 1, "answer", single_word=True, normalized=True),
                added(n + 2, "é!", normalized=True)],
        },
        "tiny_behaviors": {
            "normalizer": {"type": "NFKC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False},
                {"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "MergedWithNext", "invert": False},
                {"type": "Split", "pattern": {"Regex": "[aeiou]"}, "behavior": "Contiguous", "invert": False},
                {"type": "Split", "pattern": {"String": "x"}, "behavior": "Removed", "invert": False},
                {"type": "Split", "pattern": {"Regex": "[.!?]"}, "behavior": "Isolated", "invert": True},
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]},
            "model_overrides": {"ignore_merges": True},
        },
    }


def apply_overrides(base, overrides):
    tok = json.loads(json.dumps(base))
    for key, value in overrides.items():
        if key == "model_overrides":
            tok["model"].update(value)
        else:
            tok[key] = value
    return tok


def write_golden(name, tok_path, out_path, count, seed, overrides=None):
    with open(tok_path, "rb") as f:
        raw = f.read()
    sha = hashlib.sha256(raw).hexdigest()
    if overrides is None:
        tok = tokenizers.Tokenizer.from_file(tok_path)
    else:
        tok = tokenizers.Tokenizer.from_str(json.dumps(apply_overrides(json.loads(raw), overrides)))
    rel = os.path.relpath(os.path.abspath(tok_path), REPO)
    texts = FIXED + random_texts(count, seed)
    with open(out_path, "w", encoding="utf-8") as out:
        header = {"tokenizer": rel, "sha256": sha, "tokenizers_version": tokenizers.__version__}
        if overrides is not None:
            header["overrides"] = overrides
        out.write(json.dumps(header, ensure_ascii=False) + "\n")
        for i, text in enumerate(texts):
            ids = tok.encode(text, add_special_tokens=False).ids
            case = {"text": text, "ids": ids,
                    "decoded": tok.decode(ids, skip_special_tokens=False),
                    "decoded_skip": tok.decode(ids, skip_special_tokens=True)}
            if i < len(FIXED) and len(ids) <= 40:
                case["prefixes"] = [tok.decode(ids[:k], skip_special_tokens=False) for k in range(1, len(ids))]
            out.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"{name}: {len(texts)} cases -> {os.path.relpath(out_path, REPO)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", default=os.path.join(REPO, "build", "models"))
    args = ap.parse_args()
    sets = [
        ("tiny", os.path.join(REPO, "configs", "tokenizers", "tiny.json"), 250, 1),
        ("smollm2", os.path.join(args.models_dir, "smollm2-135m-instruct", "tokenizer.json"), 300, 2),
        ("claude_v1", os.path.join(args.models_dir, "claude-v1-tokenizer", "tokenizer.json"), 300, 3),
    ]
    for name, path, count, seed in sets:
        write_golden(name, path, os.path.join(HERE, f"{name}.jsonl"), count, seed)
    with open(sets[0][1]) as f:
        tiny = json.load(f)
    for k, (name, overrides) in enumerate(variants(tiny).items()):
        write_golden(name, sets[0][1], os.path.join(HERE, f"{name}.jsonl"), 250, 10 + k, overrides)


if __name__ == "__main__":
    main()
