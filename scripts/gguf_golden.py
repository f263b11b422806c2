"""Dequantization golden for tests/engine/io/gguf_model_test.cc (a test reference; never committed).

  python gguf_golden.py MODEL.gguf OUT.json

Runs under build/pyref (the `gguf` package). For up to 5 tensors of each type in the file (the
first four and the last), writes the first 64 values of the dequantized tensor (ggml order) as
float32 bit patterns and the sum of all its values (math.fsum, correctly rounded, in f64).
Writes OUT.json.tmp and renames it, so an interrupted run leaves no half-written golden.
"""
import json
import math
import os
import sys

import numpy as np
from gguf import GGUFReader, dequantize


def main():
    path, out = sys.argv[1:3]
    reader = GGUFReader(path)
    by_type = {}
    for t in reader.tensors:
        by_type.setdefault(t.tensor_type.name, []).append(t)
    tensors = []
    for name, ts in sorted(by_type.items()):
        for t in ts[:4] + ts[4:][-1:]:
            w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(-1)
            tensors.append({
                "name": t.name, "type": name, "numel": int(w.size),
                "first_bits": [int(b) for b in w[:64].view(np.uint32)],
                "sum": math.fsum(w.astype(np.float64).tolist()),
            })
    with open(out + ".tmp", "w") as f:
        json.dump({"file": os.path.basename(path), "tensors": tensors}, f)
    os.rename(out + ".tmp", out)


if __name__ == "__main__":
    main()
