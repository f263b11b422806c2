"""References that transformers 5 makes from GGUF files, for the GGUF tests (never committed).

  python gguf_reference.py tokenizer MODEL.gguf OUT_DIR
      OUT_DIR/tokenizer.json   the tokenizer transformers builds from the file's metadata
      OUT_DIR/golden.jsonl     line 1 {"file", "transformers", "tokenizers"}; then one text a line:
                               {"text", "ids": encode(text, add_special_tokens=False),
                               "decoded": decode(ids)}
      OUT_DIR/chat.jsonl       (a file with a chat template) one conversation a line:
                               {"messages", "text": the rendered prompt, "ids": its token ids}, as
                               apply_chat_template(..., add_generation_prompt=True) gives them
      OUT_DIR/special.json     bos/eos/unk/pad tokens and add_bos_token as transformers reads them

Runs under a venv with transformers 5 (scripts/setup-python-ref.sh's build/pyref5). Texts: the
tokenizer golden's fixed and seeded random ones (tests/engine/tokenizer/tokenizer_golden/
make_golden.py) and texts aimed at GGUF vocabularies (control and user-defined tokens, runs of
spaces, tabs and newlines, digit runs). Writes into OUT_DIR.tmp and renames it when complete.
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "engine", "tokenizer", "tokenizer_golden"))
import make_golden  # noqa: E402

GGUF_TEXTS = [
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n", "<bos>Hello<eos>", "<pad><unk><mask>",
    "<unused0> <unused99>", "[multimodal]", "<start_of_image>", "a  b   c    d     e", "\t\t\tindented\n\t\tcode",
    "\n\n\n\nfour newlines", " \n \n ", "line one\n\nline two\n\n\nline three", "x" + " " * 31 + "y",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<|fim_prefix|>def f():<|fim_suffix|><|fim_middle|>",
    "<|im_start|>assistant\n<think>\nhmm\n</think>\n", "1 12 123 1234 12345 123456 1234567 12345678",
    "3.14159265358979 2.71828 6.022e23", "I'M HERE, YOU'RE THERE, WE'LL SEE, THEY'D KNOW", "don't DON'T",
    "    def forward(self, x):\n        return self.proj(x)  # 8 spaces\n", "¿Qué? ¡Sí! Ça va. Ñandú.",
    "Привет, мир! Γειά σου κόσμε. שלום עולם. مرحبا بالعالم. नमस्ते दुनिया.", "😀😃😄😁 🇫🇷 🏳️‍🌈 ❤️",
    "\u0000\u0001\u001f control chars \u007f", "trailing spaces   ", "   leading spaces", "▁already▁metaspace",
]

CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "You are a terse assistant."}, {"role": "user", "content": "Name a prime number."}],
    [{"role": "user", "content": "Write a Python function that reverses a string."},
     {"role": "assistant", "content": "def rev(s):\n    return s[::-1]"},
     {"role": "user", "content": "Now make it handle None."}],
    [{"role": "user", "content": "Translate to French: good morning 🙂"}],
]


def ids_of(result):
    """apply_chat_template(tokenize=True) returns a list, or a BatchEncoding with input_ids."""
    if isinstance(result, dict) or hasattr(result, "keys"):
        result = result["input_ids"]
    return [int(i) for i in result]


def write_tokenizer(path, out):
    import tokenizers
    import transformers
    from transformers import AutoTokenizer

    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)), gguf_file=os.path.basename(path))
    backend = tok.backend_tokenizer
    with open(os.path.join(tmp, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(backend.to_str())
    texts = make_golden.FIXED + GGUF_TEXTS + make_golden.random_texts(300, 37)
    with open(os.path.join(tmp, "golden.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"file": os.path.basename(path), "transformers": transformers.__version__,
                            "tokenizers": tokenizers.__version__}) + "\n")
        for text in texts:
            ids = tok.encode(text, add_special_tokens=False)
            f.write(json.dumps({"text": text, "ids": ids, "decoded": backend.decode(ids, skip_special_tokens=False)},
                               ensure_ascii=False) + "\n")
    if tok.chat_template:
        with open(os.path.join(tmp, "chat.jsonl"), "w", encoding="utf-8") as f:
            for messages in CONVERSATIONS:
                text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
                ids = ids_of(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
                f.write(json.dumps({"messages": messages, "text": text, "ids": ids}, ensure_ascii=False) + "\n")
    special = {name: getattr(tok, name) for name in ("bos_token", "eos_token", "unk_token", "pad_token")}
    special.update({f"{name}_id": getattr(tok, f"{name}_id") for name in ("bos_token", "eos_token", "unk_token", "pad_token")})
    special["add_bos_token"] = bool(getattr(tok, "add_bos_token", False))
    with open(os.path.join(tmp, "special.json"), "w", encoding="utf-8") as f:
        json.dump(special, f, ensure_ascii=False, indent=1)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "tokenizer":
        write_tokenizer(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
