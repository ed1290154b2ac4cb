"""safetensors I/O: the `safetensors` package when importable, else a small hand-written codec.

Format: u64 little-endian header length N, N bytes of JSON header {name: {dtype, shape,
data_offsets: [begin, end]}, "__metadata__": {...}} (padded with spaces to a multiple of 8),
then the raw little-endian tensor bytes; offsets are relative to the start of the data."""
import json
import struct
from typing import Dict, Optional

import torch

_DT = {torch.bfloat16: "BF16", torch.float32: "F32", torch.float16: "F16", torch.int64: "I64", torch.int32: "I32"}
_TD = {v: k for k, v in _DT.items()}


def save(tensors: Dict[str, torch.Tensor], path: str, metadata: Optional[Dict[str, str]] = None,
         force_fallback: bool = False) -> str:
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    if not force_fallback:
        try:
            from safetensors.torch import save_file
            save_file(tensors, path, metadata=metadata)
            return "safetensors"
        except ImportError:
            pass
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name in sorted(tensors):
        t = tensors[name]
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""  # little-endian hosts
        header[name] = {"dtype": _DT[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
    return "fallback"


def load(path: str) -> Dict[str, torch.Tensor]:
    """Reads with the hand-written codec (works with or without the package)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        buf = bytearray(data[base + b: base + en])
        dt = _TD[e["dtype"]]
        t = torch.frombuffer(buf, dtype=dt) if len(buf) else torch.empty(0, dtype=dt)
        out[name] = t.reshape(e["shape"]).clone()
    return out
