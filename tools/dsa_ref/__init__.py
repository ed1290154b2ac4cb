"""Reference DeepSeek-V3.2 (DSA + MTP) model in PyTorch for dsa's tiny model.

Modules:
  config     DSAConfig <-> HF config.json, expected tensor names/shapes (SPEC 8.1/8.2)
  rope       YaRN RoPE tables (SPEC 8.3, class E) and their application
  quant      power-of-two FP8 e4m3 quantisation (SPEC 2.1), Hadamard, exact bf16 rounding
  model      the trainable nn.Module (un-absorbed MLA, indexer, MoE, MTP), HF parameter names
  infer      the inference reference (absorbed MLA, fp8 indexer, top-k, bf16 storage) on a
             dict of HF tensors: what golden.py runs
  st_io      safetensors read/write (the `safetensors` package if present, else a fallback)
  tokenizer  HF `tokenizers` loader with a pure-Python byte-level fallback
Works with torch 1.13 (CPU) and torch 2.x.
"""
