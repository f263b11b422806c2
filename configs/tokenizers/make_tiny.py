"""Writes tiny.json (beside this script): the small byte-level BPE tokenizer for tests and the
quickstart. Deterministic, standard library only: `python3 configs/tokenizers/make_tiny.py`.

Vocabulary: <|endoftext|> = 0, <|im_start|> = 1, <|im_end|> = 2 (special), the 256 byte tokens
(3..258, in byte order), then the tokens made by the merges below. Digits are always single
tokens (the Digits pre-tokenizer splits them and no merge joins them), which suits arithmetic
and string tasks; the merges cover the chat template and the words of the built-in tasks.
"""
import json
import os

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Words built left to right: "Ġthe" adds the merges Ġ+t, Ġt+h, Ġth+e. "Ġ" is a space, "Ċ" a newline.
WORDS = [
    "user", "assistant", "system", "ĊĊ", "ĠĠ", "ĠĠĠĠ",
    "Ġthe", "Ġis", "Ġof", "Ġand", "Ġto", "Ġa", "Ġin", "Ġwhat", "What", "Ġanswer", "Answer",
    "Ġreverse", "Reverse", "Ġsort", "Sort", "Ġlist", "Ġnumbers", "Ġstring", "Ġword", "Ġletters",
    "Ġcount", "Ġsum", "Ġplus", "Ġminus", "Ġtimes", "Ġequals", "Ġresult", "Ġfinal",
    "Ġ=", "Ġ+", "Ġ-", "Ġ*", "Ġ/", "Ġ(", ").", "?Ċ", ".Ċ", ":Ċ",
]


def bytes_to_unicode():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def build():
    vocab = {}
    for s in SPECIALS:
        vocab[s] = len(vocab)
    for b, ch in sorted(bytes_to_unicode().items()):
        vocab[ch] = len(vocab)
    merges = []
    for word in WORDS:
        prefix = word[0]
        for ch in word[1:]:
            merged = prefix + ch
            if merged not in vocab:
                merges.append(f"{prefix} {ch}")  # "a b": HF tokenizers < 0.20 reads only this form
                vocab[merged] = len(vocab)
            prefix = merged
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, s in enumerate(SPECIALS)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": merges},
    }


if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(build(), f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}")
