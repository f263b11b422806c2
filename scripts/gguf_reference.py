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
      OUT_DIR/prompts.jsonl    plain prompts as a base model gets them: {"text", "ids":
                               encode(text), BOS added when the tokenizer adds one}

  python gguf_reference.py model MODEL.gguf PROMPTS_JSONL OUT_DIR [NEW_TOKENS]
      OUT_DIR/config.json      the config transformers reads from the file
      OUT_DIR/weights.json     every parameter of the model transformers loads from the file (fp32):
                               {name: {"shape", "first_bits", "checksum"}} (gguf_golden.py's checksum)
      OUT_DIR/greedy.jsonl     for each prompt of PROMPTS_JSONL (a `tokenizer` chat.jsonl or
                               prompts.jsonl; its ids):
                               {"prompt_ids", "ids": NEW_TOKENS (default 16) greedy tokens,
                               "logprobs": each one's log-probability, "margins": its logit's lead
                               over the runner-up} from the model's fp32 forward pass

  python gguf_reference.py tiny ARCH TOKENIZER_GGUF LLAMA_CPP_SDIST OUT_DIR
      a tiny random HF model of ARCH (llama: Llama 3.2-style RoPE scaling; qwen3: QK-norm and a
      head_dim apart from hidden/heads; gemma3: sliding and global layers, random norm weights)
      with the vocabulary of TOKENIZER_GGUF, converted to GGUF (F32) by llama.cpp's own
      convert_hf_to_gguf.py from the llama-cpp-python sdist:
      OUT_DIR/hf/              the HF folder (config.json, model.safetensors, tokenizer files)
      OUT_DIR/model.gguf       llama.cpp's conversion of it (llama: tokenizer.ggml.pre llama-bpe,
                               the converter's pre-tokenizer detection forced, as for Llama 3)
      OUT_DIR/greedy.json      {"prompt_ids", "ids": 8 greedy tokens, "logprobs"} of the HF model

`tokenizer` runs under a venv with transformers 5 (scripts/setup-python-ref.sh's build/pyref5);
`model` under either (transformers 4.46.3 of build/pyref dequantizes through the `gguf` package;
gemma3 needs transformers 5). Texts: the
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

PROMPTS = ["The capital of France is", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"]

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
    with open(os.path.join(tmp, "prompts.jsonl"), "w", encoding="utf-8") as f:
        for text in PROMPTS:
            f.write(json.dumps({"text": text, "ids": tok.encode(text)}, ensure_ascii=False) + "\n")
    special = {name: getattr(tok, name) for name in ("bos_token", "eos_token", "unk_token", "pad_token")}
    special.update({f"{name}_id": getattr(tok, f"{name}_id") for name in ("bos_token", "eos_token", "unk_token", "pad_token")})
    special["add_bos_token"] = bool(getattr(tok, "add_bos_token", False))
    with open(os.path.join(tmp, "special.json"), "w", encoding="utf-8") as f:
        json.dump(special, f, ensure_ascii=False, indent=1)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)


def write_model(path, prompts_jsonl, out, new_tokens):
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    sys.path.insert(0, HERE)
    from gguf_golden import checksum

    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(path)),
                                                 gguf_file=os.path.basename(path), torch_dtype=torch.float32)
    model.eval()
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(model.config.to_dict(), f, indent=1, default=str)
    weights = {}
    for name, tensor in model.state_dict().items():
        w = tensor.detach().to(torch.float32).contiguous().numpy().reshape(-1)
        weights[name] = {"shape": list(tensor.shape), "first_bits": [int(b) for b in w[:16].view(np.uint32)],
                         "checksum": str(checksum(w))}
    with open(os.path.join(tmp, "weights.json"), "w") as f:
        json.dump(weights, f)
    with open(prompts_jsonl, encoding="utf-8") as f, open(os.path.join(tmp, "greedy.jsonl"), "w") as g:
        for line in f:
            prompt = json.loads(line)["ids"]
            ids, logprobs, margins = list(prompt), [], []
            with torch.no_grad():
                for _ in range(new_tokens):
                    logits = model(torch.tensor([ids])).logits[0, -1].to(torch.float32)
                    top = torch.topk(logits, 2)
                    logprobs.append(float(torch.log_softmax(logits, -1)[top.indices[0]]))
                    margins.append(float(top.values[0] - top.values[1]))
                    ids.append(int(top.indices[0]))
            g.write(json.dumps({"prompt_ids": prompt, "ids": ids[len(prompt):], "logprobs": logprobs,
                                "margins": margins}) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)


TINY_PROMPT = [9707, 11, 1879, 0, 576, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13]


def tiny_model(arch, vocab_size):
    import torch
    import transformers

    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_attention_heads=4, initializer_range=0.25,
                  num_key_value_heads=2, rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=151643,
                  eos_token_id=151645)
    if arch == "llama":
        config = transformers.LlamaConfig(
            **common, num_hidden_layers=2, max_position_embeddings=131072,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
        cls = transformers.LlamaForCausalLM
    elif arch == "qwen3":
        config = transformers.Qwen3Config(**common, num_hidden_layers=2, head_dim=32, max_position_embeddings=40960,
                                          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        cls = transformers.Qwen3ForCausalLM
    elif arch == "gemma3":
        common.update(num_key_value_heads=1)
        config = transformers.Gemma3TextConfig(
            **common, num_hidden_layers=7, head_dim=32, query_pre_attn_scalar=32, sliding_window=8,
            max_position_embeddings=32768, hidden_activation="gelu_pytorch_tanh",
            layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(7)],
            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
        cls = transformers.Gemma3ForCausalLM
    else:
        sys.exit(f"unknown tiny architecture {arch}")
    torch.manual_seed(37)
    model = cls(config).to(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # Gemma's start at 0 and Llama's at 1: make them matter
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


def convert_with_llama_cpp(sdist, hf_dir, out, pre):
    """llama.cpp's convert_hf_to_gguf.py, vendored in the llama-cpp-python sdist, in this process."""
    import tarfile
    import tempfile

    work = tempfile.mkdtemp()
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers()
                   if "/vendor/llama.cpp/" in m.name and any(p in m.name for p in (
                       "/convert_hf_to_gguf.py", "/conversion/", "/gguf-py/"))]
        tar.extractall(work, members=members)
    root = os.path.join(work, os.path.commonpath([m.name for m in members]).split("/vendor/")[0], "vendor", "llama.cpp")
    sys.path.insert(0, os.path.join(root, "gguf-py"))
    sys.path.insert(0, root)
    for module in [m for m in sys.modules if m == "gguf" or m.startswith("gguf.")]:
        del sys.modules[module]  # the converter brings the gguf-py it is written against
    import conversion.base
    import convert_hf_to_gguf

    if pre is not None:
        conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", hf_dir, "--outtype", "f32", "--outfile", out]
    try:
        convert_hf_to_gguf.main()
    finally:
        sys.argv = argv
        shutil.rmtree(work, ignore_errors=True)


def write_tiny(arch, tokenizer_gguf, sdist, out):
    import torch
    from transformers import AutoTokenizer

    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(tokenizer_gguf)),
                                        gguf_file=os.path.basename(tokenizer_gguf))
    # Gemma's converter keeps the embedding rows of the tokenizer's tokens only (151665 for Qwen's)
    vocab_size = len(tok) if arch == "gemma3" else 151936
    model = tiny_model(arch, vocab_size)
    hf = os.path.join(tmp, "hf")
    model.save_pretrained(hf)
    tok.save_pretrained(hf)
    convert_with_llama_cpp(sdist, hf, os.path.join(tmp, "model.gguf"), "llama-bpe" if arch == "llama" else None)
    ids, logprobs = list(TINY_PROMPT), []
    with torch.no_grad():
        for _ in range(8):
            logits = model(torch.tensor([ids])).logits[0, -1].to(torch.float32)
            ids.append(int(logits.argmax()))
            logprobs.append(float(torch.log_softmax(logits, -1)[ids[-1]]))
    with open(os.path.join(tmp, "greedy.json"), "w") as f:
        json.dump({"prompt_ids": TINY_PROMPT, "ids": ids[len(TINY_PROMPT):], "logprobs": logprobs}, f)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "tokenizer":
        write_tokenizer(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 6 and sys.argv[1] == "tiny":
        write_tiny(*sys.argv[2:6])
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "model":
        write_model(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]) if len(sys.argv) == 6 else 16)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
