"""Exact numeric helpers: single-rounding bf16, power-of-two FP8 e4m3 quantisation (SPEC 2.1), Hadamard."""
import math

import torch

E4M3_MAX = 448.0


def to_bf16(d: torch.Tensor) -> torch.Tensor:
    """Round a float64 (or float32) tensor to bf16 with ONE round-to-nearest-even.

    fp64 -> fp32 -> bf16 double rounding differs from a single rounding only when the fp32 value
    lands exactly on a bf16 midpoint after rounding; then nudge it one fp32 ulp towards d."""
    if d.dtype != torch.float64:
        return d.to(torch.bfloat16)
    r = d.to(torch.float32)
    bits = r.view(torch.int32)
    tie = ((bits & 0xFFFF) == 0x8000) & (r.to(torch.float64) != d)
    if bool(tie.any()):
        inf = torch.full_like(r, math.inf)
        toward = torch.where(d > r.to(torch.float64), inf, -inf)
        r = torch.where(tie, torch.nextafter(r, toward), r)
    return r.to(torch.bfloat16)


def round_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round values already clamped to [-448, 448] to the nearest e4m3fn value (RNE, subnormals
    down to 2^-9); returns the decoded values as float64 (exact)."""
    x = x.to(torch.float64)
    ax = x.abs()
    _, E = torch.frexp(torch.where(ax > 0, ax, torch.ones_like(ax)))  # ax = m*2^E, m in [0.5,1)
    e = (E - 1).clamp(min=-6)  # unbiased exponent, min normal exponent -6 (subnormals share it)
    quantum = torch.ldexp(torch.ones_like(x), (e - 3).to(torch.int32))  # 3 mantissa bits
    q = torch.round(x / quantum) * quantum  # torch.round is half-to-even; division is exact
    return torch.where(ax > 0, q, x * 0.0)  # keeps the sign of zero


def quant_block_pow2(x: torch.Tensor):
    """SPEC 2.1 over the last axis (block = whole last axis, 128). x bf16/fp32, finite.

    Returns (q, s): q float64 holding exact e4m3 values, s fp32 power-of-two scales [...]."""
    xf = x.to(torch.float32)
    a = xf.abs().amax(dim=-1)
    a = torch.clamp(a, min=1e-4)
    v = a / torch.tensor(448.0, dtype=torch.float32)  # IEEE fp32 division
    m, E = torch.frexp(v)  # v = m*2^E, m in [0.5,1): f = 2m, exponent E-1
    e = torch.where(m == 0.5, E - 1, E)
    s = torch.ldexp(torch.ones_like(v), e.to(torch.int32)).to(torch.float32)
    scaled = xf.to(torch.float64) * torch.ldexp(torch.ones_like(v, dtype=torch.float64), (-e).to(torch.int32))[..., None]
    q = round_e4m3(scaled.clamp(-E4M3_MAX, E4M3_MAX))
    return q, s


def hadamard_matrix(n: int, dtype=torch.float64) -> torch.Tensor:
    """Sylvester-order Hadamard scaled by n^-1/2: H[u,v] = n^-1/2 (-1)^popcount(u&v)."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    assert h.shape[0] == n
    return (h * n ** -0.5).to(dtype)
