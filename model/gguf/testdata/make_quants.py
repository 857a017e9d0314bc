"""Writes quants.gguf: for each GGUF block format gosling reads, a tensor of
random blocks (named after the type) and the float32 values gguf-py's
reference dequantisation gives for it (same name plus ".f32"). The blocks'
quant bits are uniformly random; their f16 scales are finite, of mixed sign,
with zeros and subnormals among them.

    pip install gguf numpy && python3 make_quants.py
"""
import struct

import numpy as np
from gguf.quants import GGMLQuantizationType as T, dequantize

ROWS, COLS = 2, 512

# Byte offsets of each type's f16 fields within a block, and the block size.
FORMATS = {
    T.Q4_0: (18, [0]), T.Q4_1: (20, [0, 2]), T.Q5_0: (22, [0]), T.Q5_1: (24, [0, 2]),
    T.Q2_K: (84, [80, 82]), T.Q3_K: (110, [108]), T.Q4_K: (144, [0, 2]),
    T.Q5_K: (176, [0, 2]), T.Q6_K: (210, [208]), T.IQ4_NL: (18, [0]), T.IQ4_XS: (136, [0]),
}
BLOCK_VALUES = {T.Q2_K: 256, T.Q3_K: 256, T.Q4_K: 256, T.Q5_K: 256, T.Q6_K: 256, T.IQ4_XS: 256}


def random_blocks(rng, qtype):
    size, f16_fields = FORMATS[qtype]
    n = ROWS * COLS // BLOCK_VALUES.get(qtype, 32)
    blocks = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    scales = (rng.standard_normal(n * len(f16_fields)) * 0.02).astype(np.float16)
    scales[::7] = np.float16(0)
    scales[3::11] = np.float16(3e-6)  # subnormal in f16
    scales = scales.reshape(n, len(f16_fields))
    for i, off in enumerate(f16_fields):
        blocks[:, off:off + 2] = scales[:, i:i + 1].view(np.uint8).reshape(n, 2)
    return blocks.reshape(ROWS, -1)


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def main():
    rng = np.random.default_rng(24)
    tensors = []  # (name, ggml type, raw bytes)
    for qtype in FORMATS:
        raw = random_blocks(rng, qtype)
        values = dequantize(raw, qtype).astype(np.float32)
        assert values.shape == (ROWS, COLS)
        tensors.append((qtype.name, int(qtype), raw.tobytes()))
        tensors.append((qtype.name + ".f32", 0, values.tobytes()))
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1)
    header += gguf_string("general.name") + struct.pack("<I", 8) + gguf_string("gguf-py dequantisation vectors")
    data, offsets = b"", []
    for _, _, raw in tensors:
        data += b"\0" * (-len(data) % 32)
        offsets.append(len(data))
        data += raw
    for (name, typ, _), off in zip(tensors, offsets):
        header += gguf_string(name) + struct.pack("<I", 2) + struct.pack("<QQ", COLS, ROWS)
        header += struct.pack("<IQ", typ, off)
    header += b"\0" * (-len(header) % 32)
    with open("quants.gguf", "wb") as f:
        f.write(header + data)


if __name__ == "__main__":
    main()
