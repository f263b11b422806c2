#!/usr/bin/env bash
# setup-python-ref.sh - the Python reference implementations the tests compare against, in two
# venvs (idempotent: each reinstalls only when its pinned requirements file changed):
#   build/pyref   HF transformers 4.46.3 on Debian's torch 1.13 (tests/python-ref-requirements.txt):
#                 the golden references of Llama/Qwen2/SmolLM2, tokenizers, GGUF and chat templates
#   build/pyref5  PyPI torch 2.x + transformers 5.x + peft (tests/python-ref5-requirements.txt):
#                 Qwen3, Llama 3.x RoPE scaling, Gemma 3 and transformers 5's config format
# Never used by rlrun itself: test references only. RLRUN_PYREF / RLRUN_PYREF5 move the venvs.
set -euo pipefail
cd "$(dirname "$0")/.."

# install VENV REQUIREMENTS VENV_FLAGS...: the venv at VENV with exactly REQUIREMENTS' pins.
install() {
  local venv=$1 requirements=$2
  shift 2
  if [ ! -x "$venv/bin/python" ]; then
    /usr/bin/python3 -m venv "$@" "$venv"
  fi
  if [ -f "$requirements" ] && ! cmp -s "$requirements" "$venv/.installed-requirements"; then
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/.installed-requirements"
  fi
  echo "setup-python-ref: $venv ready"
}

install "${RLRUN_PYREF:-build/pyref}" tests/python-ref-requirements.txt --system-site-packages
install "${RLRUN_PYREF5:-build/pyref5}" tests/python-ref5-requirements.txt
