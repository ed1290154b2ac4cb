"""YaRN RoPE tables (SPEC 8.3, class E) and their application."""
import math

import torch

from .config import DSAConfig


def yarn_inv_freq(cfg: DSAConfig) -> torch.Tensor:
    """theta'_i, i < rope_dim/2, computed in fp64 and rounded to fp32."""
    dim = cfg.qk_rope_head_dim
    base = float(cfg.rope_theta)
    rs = cfg.rope_scaling
    factor = float(rs["factor"])
    L0 = float(rs["original_max_position_embeddings"])

    def c(beta):
        return dim * math.log(L0 / (2 * math.pi * beta)) / (2 * math.log(base))

    low = max(math.floor(c(rs["beta_fast"])), 0)
    high = min(math.ceil(c(rs["beta_slow"])), dim - 1)
    if low == high:
        high += 0.001
    i = torch.arange(dim // 2, dtype=torch.float64)
    theta = base ** (-2.0 * i / dim)
    ramp = ((i - low) / (high - low)).clamp(0.0, 1.0)
    theta_p = theta * (1.0 - ramp) + (theta / factor) * ramp
    return theta_p.to(torch.float32)


def rope_tables(cfg: DSAConfig, n_pos: int):
    """cos, sin [n_pos, rope_dim/2] fp32: angle = fp32(pos)*theta' in fp32; cos/sin in fp64 -> fp32."""
    inv = yarn_inv_freq(cfg)
    pos = torch.arange(n_pos, dtype=torch.float32)
    ang = pos[:, None] * inv[None, :]  # fp32 product, one rounding
    ang64 = ang.to(torch.float64)
    return torch.cos(ang64).to(torch.float32), torch.sin(ang64).to(torch.float32)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool, heads: bool = False) -> torch.Tensor:
    """x [..., T, 64], or [..., T, H, 64] with heads=True; cos/sin [T, 32].

    Interleaved pairs (x[2i], x[2i+1]) (MLA q_pe/k_pe); non-interleaved pairs (x[i], x[i+32]) (indexer).
    a' = a cos - b sin, b' = a sin + b cos, in fp32, result in x's dtype."""
    dt = x.dtype
    xf = x.float()
    if heads:
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    if interleaved:
        a, b = xf[..., 0::2], xf[..., 1::2]
        ra, rb = a * cos - b * sin, a * sin + b * cos
        out = torch.stack((ra, rb), dim=-1).flatten(-2)
    else:
        h = xf.shape[-1] // 2
        a, b = xf[..., :h], xf[..., h:]
        out = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return out.to(dt)
