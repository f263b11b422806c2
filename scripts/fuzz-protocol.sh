#!/usr/bin/env bash
# fuzz-protocol.sh [SECONDS] - coverage-guided fuzzing of the wire protocol decoder with clang's
# libFuzzer (+ ASan/UBSan) for SECONDS (default 60). Needs clang++; the corpus is kept in
# build/fuzz/corpus between runs. CI runs the deterministic tests/common/protocol_fuzz_test instead.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${RLRUN_FUZZ_DIR:-$root/build/fuzz}
mkdir -p "$out/corpus"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I"$root" \
  "$root/tests/common/protocol/protocol_libfuzzer.cc" \
  "$root"/common/protocol/{protocol,names,wire_codec}.cc "$root"/common/{status,check}.cc \
  "$root"/common/observe/log.cc \
  -lzmq -o "$out/protocol_fuzzer"
RLRUN_FUZZ_WRITE_SEEDS="$out/corpus" "$out/protocol_fuzzer" -max_total_time="${1:-60}" -max_len=65536 "$out/corpus"
