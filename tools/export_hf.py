#!/usr/bin/env python3
"""Export a training checkpoint to the HF folder dsa loads (SPEC 8.1/8.2/8.7).

  python3 tools/export_hf.py --ckpt runs/tiny/ckpt.pt --tokenizer models/tiny-dsa/tokenizer.json --out models/tiny-dsa

Writes OUT/config.json, OUT/model.safetensors (bf16; e_score_correction_bias fp32; MTP layer at index
num_hidden_layers with its own embed_tokens/shared_head.head copies; no quantization_config) and
copies tokenizer.json (unless it already is OUT/tokenizer.json). Asserts the tensor list and shapes,
the 19,251,088 parameters of SPEC 8.7 (for the tiny config) and the 40 MiB folder limit.
"""
import argparse
import math
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsa_ref import st_io  # noqa: E402
from dsa_ref.config import TINY_PARAMS, DSAConfig, expected_tensors, param_count  # noqa: E402

LIMIT = 40 * 1024 * 1024


def export(ckpt_path, tokenizer, out, force_fallback=False):
    ck = torch.load(ckpt_path, map_location="cpu")
    cfg = DSAConfig.from_dict(ck["config"])
    sd = ck["state_dict"]
    L = cfg.num_hidden_layers
    # The MTP copies (tied during training) are ordinary state_dict entries; make them real copies.
    for k in (f"model.layers.{L}.embed_tokens.weight", f"model.layers.{L}.shared_head.head.weight"):
        if k not in sd:
            sd[k] = sd["model.embed_tokens.weight" if "embed" in k else "lm_head.weight"]
    tensors = {}
    for name, shape, dt in expected_tensors(cfg):
        t = sd[name]
        assert tuple(t.shape) == shape, (name, tuple(t.shape), shape)
        tensors[name] = t.to(torch.float32 if dt == "fp32" else torch.bfloat16).clone().contiguous()
    extra = set(sd) - set(tensors)
    assert not extra, f"unexpected tensors: {sorted(extra)[:5]}"
    n = sum(t.numel() for t in tensors.values())
    assert n == param_count(cfg)
    if (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers) == (6144, 256, 4):
        assert n == TINY_PARAMS, n
    os.makedirs(out, exist_ok=True)
    cfg.save(os.path.join(out, "config.json"))
    how = st_io.save(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"},
                     force_fallback=force_fallback)
    dst = os.path.join(out, "tokenizer.json")
    if os.path.abspath(tokenizer) != os.path.abspath(dst):
        shutil.copyfile(tokenizer, dst)
    sizes = {f: os.path.getsize(os.path.join(out, f)) for f in ("config.json", "model.safetensors", "tokenizer.json")}
    total = sum(sizes.values())
    print(f"[export] {n} parameters in {len(tensors)} tensors (writer: {how}); sizes {sizes}; total {total} bytes "
          f"({total / 2**20:.2f} MiB, limit 40 MiB)")
    assert total <= LIMIT, f"shipped folder {total} bytes exceeds 40 MiB"
    # round trip
    back = st_io.load(os.path.join(out, "model.safetensors"))
    assert set(back) == set(tensors) and all(torch.equal(back[k], tensors[k]) for k in tensors)
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tokenizer", default=None, help="default: the path recorded in the checkpoint")
    ap.add_argument("--out", default="models/tiny-dsa")
    ap.add_argument("--fallback-writer", action="store_true", help="use the hand-written safetensors writer")
    a = ap.parse_args()
    tok = a.tokenizer or torch.load(a.ckpt, map_location="cpu")["tokenizer"]
    export(a.ckpt, tok, a.out, a.fallback_writer)


if __name__ == "__main__":
    main()
