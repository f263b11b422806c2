"""Dequantization golden for the GGUF tests (a test reference; never committed).

  python gguf_golden.py types OUT.gguf        a GGUF with two tensors of every type rlrun reads,
                                              of random blocks (scales finite, every other bit random)
  python gguf_golden.py dequant MODEL.gguf OUT.json
                                              the `gguf` package's dequantize() of every tensor

Runs under build/pyref (the `gguf` package; its dequantizers are the same in 0.10.0 and 0.19.0).
For each tensor OUT.json holds its type, its element count, the float32 bit patterns of its first
64 values and a checksum of all of them: sum over i of bits[i] * (2 i + 1) modulo 2^64 (as a
decimal string), which tests/engine/io/gguf_model_test.cc and gguf_dequant_test.cc recompute.
Writes OUT.tmp and renames it, so an interrupted run leaves no half-written file.
"""
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES, GGUFReader, GGUFWriter, dequantize

# Byte offsets of the IEEE-half scale fields in one block of each type (ggml-common.h).
HALF_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
CHUNK = 1 << 24


def finite_halves(rng, n):
    """n random IEEE-half bit patterns, every exponent but the all-ones one (Inf/NaN)."""
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
    return np.where((h & 0x7C00) == 0x7C00, h & ~np.uint32(0x4000), h).astype(np.uint16)


def random_tensor(rng, qtype, rows, cols):
    """(data, raw_dtype) for one tensor of `rows` x `cols` values of `qtype`."""
    if qtype == T.F32:
        bits = rng.integers(0, 1 << 32, size=(rows, cols), dtype=np.uint64).astype(np.uint32)
        bits = np.where((bits & 0x7F800000) == 0x7F800000, bits & ~np.uint32(0x40000000), bits)
        return bits.view(np.float32), None
    if qtype == T.F16:
        return finite_halves(rng, rows * cols).reshape(rows, cols).view(np.float16), None
    if qtype == T.BF16:
        bits = rng.integers(0, 1 << 16, size=(rows, cols), dtype=np.uint32)
        bits = np.where((bits & 0x7F80) == 0x7F80, bits & ~np.uint32(0x4000), bits).astype(np.uint16)
        return bits.view(np.uint8).reshape(rows, cols * 2), qtype
    block, size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint16).astype(np.uint8)
    for at in HALF_FIELDS[qtype]:
        blocks[:, at:at + 2] = finite_halves(rng, blocks.shape[0]).view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, cols // block * size), qtype


def write_types(out):
    rng = np.random.default_rng(37)
    writer = GGUFWriter(out + ".tmp", "rlrun-dequant-test")
    for qtype in [T.F32, T.F16, T.BF16, *HALF_FIELDS]:
        for rows, cols in [(3, 512), (1, 4096)]:
            data, raw = random_tensor(rng, qtype, rows, cols)
            writer.add_tensor(f"{qtype.name}.{rows}x{cols}", data, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.rename(out + ".tmp", out)


def checksum(values):
    """sum over i of bits[i] * (2 i + 1), modulo 2^64 (numpy's uint64 arithmetic wraps)."""
    bits = values.view(np.uint32)
    total = 0
    for start in range(0, bits.size, CHUNK):
        part = bits[start:start + CHUNK].astype(np.uint64)
        weights = np.arange(start, start + part.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        total = (total + int((part * weights).sum(dtype=np.uint64))) % (1 << 64)
    return total


def write_dequant(path, out):
    reader = GGUFReader(path)
    tensors = []
    for t in reader.tensors:
        w = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(-1)
        tensors.append({
            "name": t.name, "type": t.tensor_type.name, "numel": int(w.size),
            "first_bits": [int(b) for b in w[:64].view(np.uint32)],
            "checksum": str(checksum(w)),
        })
    with open(out + ".tmp", "w") as f:
        json.dump({"file": os.path.basename(path), "tensors": tensors}, f)
    os.rename(out + ".tmp", out)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "types":
        write_types(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "dequant":
        write_dequant(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
