"""Inference reference (what golden.py runs): absorbed MLA (SPEC 8.4), fp8 lightning indexer (8.5,
2.1, 3b), top-k with the total order of 3e, sparse MLA (3f), noaux_tc MoE (8.6), MTP layer (6.5).

Operates on a dict of checkpoint tensors (HF names, bf16; e_score_correction_bias fp32), one
sequence at a time; every row is computed independently (batch invariant). Storage follows the
SPEC: activations between ops are bf16; GEMMs accumulate in fp64 and round once (8.8); norms,
RoPE and Hadamard run in fp32/fp64 and round to bf16; the indexer weights, router and LM head
produce fp32; residual adds are fp32 of two bf16 operands rounded once.
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F

from .config import DSAConfig
from .quant import hadamard_matrix, quant_block_pow2, to_bf16
from .rope import apply_rope, rope_tables

f64 = torch.float64


def lin(x: torch.Tensor, w: torch.Tensor, out: str = "bf16") -> torch.Tensor:
    """y = x W^T with fp64 accumulation; bf16 (one RNE rounding) or fp32 output."""
    y = torch.matmul(x.to(f64), w.to(f64).t())
    return to_bf16(y) if out == "bf16" else y.to(torch.float32)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(torch.bfloat16)


def layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), eps).to(torch.bfloat16)


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.float() + b.float()).to(torch.bfloat16)


def select_topk(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Bool [T,T]: row t selects positions in [0, t] by (value desc, position asc), the first min(t+1, k).

    One stable descending sort per row over all columns with the future set to -inf: finite visible
    logits come first in the SPEC 3e order (stability keeps equal values in ascending position)."""
    T = logits.shape[0]
    causal = torch.ones(T, T, dtype=torch.bool, device=logits.device).tril()
    if T <= k:
        return causal
    assert bool(torch.isfinite(logits[causal]).all()), "non-finite index logits"
    lg = logits.masked_fill(~causal, float("-inf"))
    order = torch.sort(lg, dim=-1, descending=True, stable=True).indices[:, :k]
    sel = torch.zeros(T, T, dtype=torch.bool, device=logits.device).scatter_(1, order, True)
    return sel & causal


class Reference:
    def __init__(self, cfg: DSAConfig, tensors: Dict[str, torch.Tensor], device="cpu", max_pos: int = 4096):
        self.cfg = cfg
        self.dev = torch.device(device)
        self.W = {k: v.to(self.dev) for k, v in tensors.items()}
        cos, sin = rope_tables(cfg, max_pos)
        self.cos, self.sin = cos.to(self.dev), sin.to(self.dev)
        self.had = hadamard_matrix(cfg.index_head_dim).to(self.dev)
        self.last_selection = {}  # layer -> bool [T,T], for inspection

    # ---- lightning indexer (SPEC 8.5) -----------------------------------------------------
    def indexer_logits(self, p: str, x: torch.Tensor, c_q: torch.Tensor, cos, sin) -> torch.Tensor:
        cfg, W = self.cfg, self.W
        T = x.shape[0]
        Hi, Di, r = cfg.index_n_heads, cfg.index_head_dim, cfg.qk_rope_head_dim
        qi = lin(c_q, W[p + "indexer.wq_b.weight"]).view(T, Hi, Di)
        qi = torch.cat((apply_rope(qi[..., :r], cos, sin, interleaved=False, heads=True), qi[..., r:]), -1)
        ki = layernorm(lin(x, W[p + "indexer.wk.weight"]), W[p + "indexer.k_norm.weight"], W[p + "indexer.k_norm.bias"])
        ki = torch.cat((apply_rope(ki[..., :r], cos, sin, interleaved=False), ki[..., r:]), -1)
        qh = to_bf16(torch.matmul(qi.to(f64), self.had.t()))  # y_u = sum_v H[u,v] x_v
        kh = to_bf16(torch.matmul(ki.to(f64), self.had.t()))
        q8, qscale = quant_block_pow2(qh)  # [T,Hi,Di] exact e4m3 values (f64), [T,Hi]
        k8, kscale = quant_block_pow2(kh)  # [T,Di], [T]
        w = lin(x, W[p + "indexer.weights_proj.weight"], out="fp32")  # fp32 from fp32 upcasts
        w = w * torch.tensor(Hi ** -0.5, dtype=torch.float32) * qscale * torch.tensor(Di ** -0.5, dtype=torch.float32)
        dots = torch.relu(torch.einsum("thd,sd->ths", q8, k8))  # exact products, f64 sums
        logits = kscale.to(f64)[None, :] * torch.einsum("ths,th->ts", dots, w.to(f64))
        return logits.to(torch.float32)

    # ---- MLA, absorbed (SPEC 8.4) + sparse MLA (3f) ---------------------------------------------
    def attention(self, p: str, x: torch.Tensor, pos0: int, dense: bool) -> torch.Tensor:
        cfg, W = self.cfg, self.W
        T = x.shape[0]
        H, nope, rope, vd, C = (cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim,
                                cfg.v_head_dim, cfg.kv_lora_rank)
        cos, sin = self.cos[pos0:pos0 + T], self.sin[pos0:pos0 + T]
        c_q = rmsnorm(lin(x, W[p + "q_a_proj.weight"]), W[p + "q_a_layernorm.weight"], cfg.rms_norm_eps)
        q = lin(c_q, W[p + "q_b_proj.weight"]).view(T, H, nope + rope)
        q_pe = apply_rope(q[..., nope:], cos, sin, interleaved=True, heads=True)
        kv = lin(x, W[p + "kv_a_proj_with_mqa.weight"])
        c = rmsnorm(kv[:, :C], W[p + "kv_a_layernorm.weight"], cfg.rms_norm_eps)
        k_pe = apply_rope(kv[:, C:], cos, sin, interleaved=True)
        cache = torch.cat((c, k_pe), -1)  # [T, 576] bf16: the latent cache rows
        wkvb = W[p + "kv_b_proj.weight"].view(H, nope + vd, C)
        w_uk, w_uv = wkvb[:, :nope], wkvb[:, nope:]  # [H,nope,C], [H,vd,C]
        q_abs = to_bf16(torch.einsum("thn,hnc->thc", q[..., :nope].to(f64), w_uk.to(f64)))
        Q = torch.cat((q_abs, q_pe), -1)  # [T,H,576] bf16
        causal = torch.ones(T, T, dtype=torch.bool, device=self.dev).tril()
        if dense:
            allowed = causal
        else:
            ilog = self.indexer_logits(p, x, c_q, cos, sin)
            allowed = select_topk(ilog, cfg.index_topk) & causal
        self.last_selection[p] = allowed
        sm = float(torch.tensor(cfg.sm_scale, dtype=torch.float32))
        z = sm * torch.einsum("thd,sd->hts", Q.to(f64), cache.to(f64))
        z = z.masked_fill(~allowed[None], float("-inf"))
        prob = torch.softmax(z, -1)
        o_lat = to_bf16(torch.einsum("hts,sc->thc", prob, cache[:, :C].to(f64)))  # [T,H,512] bf16
        o = to_bf16(torch.einsum("thc,hvc->thv", o_lat.to(f64), w_uv.to(f64)))  # [T,H,vd]
        return lin(o.reshape(T, H * vd), W[p + "o_proj.weight"])

    # ---- FFN (SPEC 8.6) --------------------------------------------------------------------
    def mlp(self, p: str, x: torch.Tensor) -> torch.Tensor:
        W = self.W
        g = lin(x, W[p + "gate_proj.weight"])
        u = lin(x, W[p + "up_proj.weight"])
        a = (F.silu(g.float()) * u.float()).to(torch.bfloat16)
        return lin(a, W[p + "down_proj.weight"])

    def moe(self, p: str, x: torch.Tensor) -> torch.Tensor:
        cfg, W = self.cfg, self.W
        T = x.shape[0]
        E, G, per = cfg.n_routed_experts, cfg.n_group, cfg.n_routed_experts // cfg.n_group
        s = torch.sigmoid(lin(x, W[p + "gate.weight"], out="fp32"))
        s2 = s + W[p + "gate.e_score_correction_bias"].float()[None]
        top2 = torch.sort(s2.view(T, G, per), dim=-1, descending=True, stable=True).values[..., :min(2, per)]
        grp = top2.sum(-1)
        gorder = torch.sort(grp, dim=-1, descending=True, stable=True).indices[:, :cfg.topk_group]
        gmask = torch.zeros(T, G, dtype=torch.bool, device=self.dev).scatter_(1, gorder, True)
        emask = gmask[:, :, None].expand(T, G, per).reshape(T, E)
        ids = torch.sort(s2.masked_fill(~emask, float("-inf")), dim=-1, descending=True, stable=True).indices
        ids = ids[:, :cfg.num_experts_per_tok]
        wsel = s.gather(1, ids)
        wsel = wsel / wsel.sum(-1, keepdim=True) * torch.tensor(cfg.routed_scaling_factor, dtype=torch.float32)
        outs = torch.stack([self.mlp(p + f"experts.{e}.", x) for e in range(E)], 1)  # [T,E,D] bf16
        y = torch.zeros(x.shape, dtype=torch.float32, device=self.dev)
        for j in range(cfg.num_experts_per_tok):  # fp32 sum in selection order, then the shared expert
            y = y + wsel[:, j:j + 1] * outs.gather(1, ids[:, j, None, None].expand(T, 1, x.shape[1]))[:, 0].float()
        y = y + self.mlp(p + "shared_experts.", x).float()
        return y.to(torch.bfloat16)

    def block(self, i: int, h: torch.Tensor, pos0: int, dense: bool) -> torch.Tensor:
        cfg, W = self.cfg, self.W
        p = f"model.layers.{i}."
        a = self.attention(p + "self_attn.", rmsnorm(h, W[p + "input_layernorm.weight"], cfg.rms_norm_eps), pos0, dense)
        h = add(h, a)
        x = rmsnorm(h, W[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        f = self.moe(p + "mlp.", x) if cfg.is_moe_layer(i) else self.mlp(p + "mlp.", x)
        return add(h, f)

    # ---- whole model ---------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, ids: torch.Tensor, dense: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
        """ids [T] (positions 0..T-1) -> (logits [T,V] fp32, final normed hidden [T,D] bf16)."""
        cfg, W = self.cfg, self.W
        ids = ids.to(self.dev)
        h = W["model.embed_tokens.weight"][ids]
        for i in range(cfg.num_hidden_layers):
            h = self.block(i, h, 0, dense)
        hn = rmsnorm(h, W["model.norm.weight"], cfg.rms_norm_eps)
        return lin(hn, W["lm_head.weight"], out="fp32"), hn

    @torch.no_grad()
    def mtp(self, next_ids: torch.Tensor, h: torch.Tensor, dense: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
        """MTP rows i (positions 0..T-1) take (next_ids[i] = token i+1, h[i]) -> (logits [T,V] fp32,
        post-norm hidden [T,D] bf16, the post_norm chaining state)."""
        cfg, W = self.cfg, self.W
        i = cfg.num_hidden_layers
        p = f"model.layers.{i}."
        emb = W.get(p + "embed_tokens.weight", W["model.embed_tokens.weight"])
        head = W.get(p + "shared_head.head.weight", W["lm_head.weight"])
        e = rmsnorm(emb[next_ids.to(self.dev)], W[p + "enorm.weight"], cfg.rms_norm_eps)
        hh = rmsnorm(h, W[p + "hnorm.weight"], cfg.rms_norm_eps)
        x = lin(torch.cat((e, hh), -1), W[p + "eh_proj.weight"])  # embedding half first
        x = self.block(i, x, 0, dense)
        xn = rmsnorm(x, W[p + "shared_head.norm.weight"], cfg.rms_norm_eps)
        return lin(xn, head, out="fp32"), xn
