"""A safetensors file's F32 tensors rounded to BF16 (nearest, ties to even), as the Hub's BF16
files hold a model: python3 to_bf16.py IN OUT (for test_gpu_train.sh and bench/engine_cpu/lora.sh)."""
import json
import struct
import sys

import numpy as np

raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr, data, out, parts, off = json.loads(raw[8:8 + n]), raw[8 + n:], {}, [], 0
for name, t in hdr.items():
    if name == "__metadata__":
        continue
    if t["dtype"] != "F32":
        sys.exit("%s: %s is %s, not F32" % (sys.argv[1], name, t["dtype"]))
    a, b = t["data_offsets"]
    x = np.frombuffer(data[a:b], dtype="<f4").view("<u4").astype(np.uint64)
    x = ((x + 0x7FFF + ((x >> 16) & 1)) >> 16).astype("<u2")
    out[name] = {"dtype": "BF16", "shape": t["shape"], "data_offsets": [off, off + x.nbytes]}
    parts.append(x.tobytes())
    off += x.nbytes
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(parts))
