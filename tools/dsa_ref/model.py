"""The trainable tiny DeepSeek-V3.2 model (DSA + MTP) with HF parameter names (SPEC 8.2).

state_dict() keys are exactly the checkpoint's tensor names (the MTP layer's embed_tokens and
shared_head.head are tied to the main model's during training and exported as copies).

Attention modes of a forward:
  'dense'   causal attention over every visible token; indexers idle.
  'warmup'  dense attention; every indexer (MTP's included) gets a KL loss towards the dense attention
            distribution (summed over heads, L1-normalised); callers freeze everything else.
  'sparse'  each row attends to the indexer's top-k (index_topk) visible positions (rows with <= k
            visible attend to all); the indexer gets a KL loss towards the sparse attention
            distribution restricted to the selected set, with its inputs detached.

Training uses the un-absorbed MLA (q_nope . W_UK c == (W_UK^T q_nope) . c) and omits the indexer's
Hadamard rotation and fp8 quantisation (the rotation is orthogonal, so q.k is unchanged); the
inference reference (infer.py) implements the absorbed, quantised form of SPEC 8.4/8.5.
"""
import math
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import DSAConfig
from .rope import apply_rope, rope_tables

NEG_INF = float("-inf")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()
        return y.to(x.dtype)


class LayerNorm(nn.Module):
    """Indexer k_norm: LayerNorm with weight and bias, eps 1e-6, biased variance, fp32."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        y = F.layer_norm(x.float(), (x.shape[-1],), self.weight.float(), self.bias.float(), self.eps)
        return y.to(x.dtype)


def linear(d_in, d_out):
    return nn.Linear(d_in, d_out, bias=False)


def attend(q, k, v, mask: Optional[torch.Tensor], scale: float, causal: bool):
    """q,k [B,H,T,dk], v [B,H,T,dv]; mask [B,T,T] bool (True = may attend) or None with causal."""
    if hasattr(F, "scaled_dot_product_attention"):
        qs = q * (scale * math.sqrt(q.shape[-1]))  # SDPA's default scale is dk^-1/2
        if mask is None:
            return F.scaled_dot_product_attention(qs, k, v, is_causal=causal)
        return F.scaled_dot_product_attention(qs, k, v, attn_mask=mask[:, None])
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if mask is None:
        T = q.shape[-2]
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()[None]
    s = s.masked_fill(~mask[:, None], NEG_INF)
    return torch.matmul(torch.softmax(s, -1).to(v.dtype), v)


def attention_probs(q, k, mask, scale):
    """Explicit softmax probabilities [B,H,T,T] fp32 (no grad use only)."""
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    s = s.masked_fill(~mask[:, None], NEG_INF)
    return torch.softmax(s, -1)


def kl_to_target(target: torch.Tensor, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over rows of KL(target || softmax(logits restricted to mask)); target rows sum to 1 on mask."""
    lg = logits.float().masked_fill(~mask, NEG_INF)
    logq = torch.log_softmax(lg, -1)
    t = target.float()
    term = torch.where(mask & (t > 0), t * (torch.log(t.clamp_min(1e-30)) - logq), torch.zeros_like(t))
    return term.sum(-1).mean()


class Indexer(nn.Module):
    """Lightning indexer (SPEC 8.5), training form (no Hadamard, no fp8)."""

    def __init__(self, cfg: DSAConfig):
        super().__init__()
        self.cfg = cfg
        self.n_heads, self.head_dim, self.rope_dim = cfg.index_n_heads, cfg.index_head_dim, cfg.qk_rope_head_dim
        self.wq_b = linear(cfg.q_lora_rank, self.n_heads * self.head_dim)
        self.wk = linear(cfg.hidden_size, self.head_dim)
        self.k_norm = LayerNorm(self.head_dim, 1e-6)
        self.weights_proj = linear(cfg.hidden_size, self.n_heads)

    def forward(self, x, c_q, cos, sin):
        """Index logits [B,T,T] fp32 (all columns; callers mask the future)."""
        B, T, _ = x.shape
        r = self.rope_dim
        q = self.wq_b(c_q).view(B, T, self.n_heads, self.head_dim)
        q = torch.cat((apply_rope(q[..., :r], cos, sin, interleaved=False, heads=True), q[..., r:]), -1)
        k = self.k_norm(self.wk(x))
        k = torch.cat((apply_rope(k[..., :r], cos, sin, interleaved=False), k[..., r:]), -1)
        with torch.autocast(device_type=x.device.type, enabled=False):
            w = F.linear(x.float(), self.weights_proj.weight.float()) * (self.n_heads ** -0.5 * self.head_dim ** -0.5)
        dots = torch.relu(torch.einsum("bthd,bsd->bhts", q, k.to(q.dtype)))  # [B,Hi,T,T]
        return torch.einsum("bhts,bth->bts", dots.float(), w)


class MLA(nn.Module):
    def __init__(self, cfg: DSAConfig):
        super().__init__()
        self.cfg = cfg
        H, nope, rope, vd = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        self.q_a_proj = linear(cfg.hidden_size, cfg.q_lora_rank)
        self.q_a_layernorm = RMSNorm(cfg.q_lora_rank, cfg.rms_norm_eps)
        self.q_b_proj = linear(cfg.q_lora_rank, H * (nope + rope))
        self.kv_a_proj_with_mqa = linear(cfg.hidden_size, cfg.kv_lora_rank + rope)
        self.kv_a_layernorm = RMSNorm(cfg.kv_lora_rank, cfg.rms_norm_eps)
        self.kv_b_proj = linear(cfg.kv_lora_rank, H * (nope + vd))
        self.o_proj = linear(H * vd, cfg.hidden_size)
        self.indexer = Indexer(cfg)
        # Sparse mode's indexer KL (aux); a caller that only runs the layer (a frozen target) turns
        # it off and saves the explicit [B, H, T, T] probabilities it needs.
        self.indexer_loss = True

    def qkv(self, x, cos, sin):
        """Queries [B,H,T,128], keys [B,H,T,128], values [B,H,T,vd] and c_q (the indexer's input)."""
        cfg = self.cfg
        B, T, _ = x.shape
        H, nope, rope, vd = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        c_q = self.q_a_layernorm(self.q_a_proj(x))
        q = self.q_b_proj(c_q).view(B, T, H, nope + rope)
        q_pe = apply_rope(q[..., nope:], cos, sin, interleaved=True, heads=True)
        kv = self.kv_a_proj_with_mqa(x)
        c = self.kv_a_layernorm(kv[..., : cfg.kv_lora_rank])
        k_pe = apply_rope(kv[..., cfg.kv_lora_rank:], cos, sin, interleaved=True)  # [B,T,64], one head
        kvb = self.kv_b_proj(c).view(B, T, H, nope + vd)
        qf = torch.cat((q[..., :nope], q_pe), -1).transpose(1, 2)  # [B,H,T,128]
        kf = torch.cat((kvb[..., :nope], k_pe[:, :, None, :].expand(B, T, H, rope).to(kvb.dtype)), -1).transpose(1, 2)
        v = kvb[..., nope:].transpose(1, 2)
        return qf, kf, v, c_q

    def forward(self, x, cos, sin, mode: str):
        cfg = self.cfg
        B, T, _ = x.shape
        H, vd = cfg.num_attention_heads, cfg.v_head_dim
        qf, kf, v, c_q = self.qkv(x, cos, sin)
        scale = cfg.sm_scale
        aux = None
        if mode == "dense":
            o = attend(qf, kf, v, None, scale, causal=True)
        else:
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()[None].expand(B, T, T)
            ilog = self.indexer(x.detach(), c_q.detach(), cos, sin)  # [B,T,T] fp32
            if mode == "warmup":
                with torch.no_grad():
                    o = attend(qf, kf, v, None, scale, causal=True)
                    target = attention_probs(qf, kf, causal, scale).sum(1)
                    target = target / target.sum(-1, keepdim=True)
                aux = kl_to_target(target, ilog, causal)
            elif mode == "sparse":
                with torch.no_grad():
                    sel = topk_mask(ilog, causal, cfg.index_topk)
                o = attend(qf, kf, v, sel, scale, causal=False)
                if self.indexer_loss:
                    with torch.no_grad():
                        target = attention_probs(qf, kf, sel, scale).sum(1)
                        target = target / target.sum(-1, keepdim=True)
                    aux = kl_to_target(target, ilog, sel)
            else:
                raise ValueError(mode)
        o = o.transpose(1, 2).reshape(B, T, H * vd)
        return self.o_proj(o), aux


def topk_mask(ilog: torch.Tensor, causal: torch.Tensor, k: int) -> torch.Tensor:
    """Bool [B,T,T]: each row's top-k visible positions (all visible ones when <= k are visible)."""
    T = ilog.shape[-1]
    if T <= k:
        return causal
    lg = ilog.masked_fill(~causal, NEG_INF)
    idx = lg.topk(k, dim=-1).indices
    sel = torch.zeros_like(causal).scatter_(-1, idx, True)
    return sel & causal


class MLP(nn.Module):
    def __init__(self, d: int, inter: int):
        super().__init__()
        self.gate_proj = linear(d, inter)
        self.up_proj = linear(d, inter)
        self.down_proj = linear(inter, d)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    def __init__(self, cfg: DSAConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cfg.n_routed_experts, cfg.hidden_size))
        self.register_buffer("e_score_correction_bias", torch.zeros(cfg.n_routed_experts, dtype=torch.float32))


def route(cfg: DSAConfig, s: torch.Tensor, bias: torch.Tensor):
    """noaux_tc routing (SPEC 8.6) for scores s [N,E] fp32 -> (expert ids [N,k], weights [N,k] fp32)."""
    N, E = s.shape
    G = cfg.n_group
    s2 = s + bias.float()[None]
    per = E // G
    grp = s2.view(N, G, per).topk(min(2, per), dim=-1).values.sum(-1)  # [N,G]
    gsel = grp.topk(cfg.topk_group, dim=-1).indices
    gmask = torch.zeros(N, G, dtype=torch.bool, device=s.device).scatter_(1, gsel, True)
    emask = gmask[:, :, None].expand(N, G, per).reshape(N, E)
    ids = s2.masked_fill(~emask, NEG_INF).topk(cfg.num_experts_per_tok, dim=-1).indices
    w = s.gather(1, ids)
    if cfg.norm_topk_prob:
        w = w / w.sum(-1, keepdim=True)
    return ids, w * cfg.routed_scaling_factor


class MoE(nn.Module):
    def __init__(self, cfg: DSAConfig):
        super().__init__()
        self.cfg = cfg
        self.gate = Gate(cfg)
        self.experts = nn.ModuleList([MLP(cfg.hidden_size, cfg.moe_intermediate_size) for _ in range(cfg.n_routed_experts)])
        self.shared_experts = MLP(cfg.hidden_size, cfg.moe_intermediate_size * cfg.n_shared_experts)

    def forward(self, x):
        B, T, D = x.shape
        xf = x.reshape(B * T, D)
        with torch.autocast(device_type=x.device.type, enabled=False):
            s = torch.sigmoid(F.linear(xf.float(), self.gate.weight.float()))
        ids, w = route(self.cfg, s, self.gate.e_score_correction_bias)
        E = self.cfg.n_routed_experts
        comb = torch.zeros(B * T, E, dtype=w.dtype, device=x.device).scatter_(1, ids, w)
        # Every expert on every token (4 tiny experts: simpler than dispatch); unselected weights are 0.
        y = self.shared_experts(xf).float()
        for e, ex in enumerate(self.experts):
            y = y + comb[:, e:e + 1] * ex(xf).float()
        load = torch.zeros(E, device=x.device).scatter_add_(0, ids.reshape(-1), torch.ones(ids.numel(), device=x.device))
        return y.to(x.dtype).view(B, T, D), load.detach()


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DSAConfig, idx: int, dropout: float):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = MLA(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MoE(cfg) if cfg.is_moe_layer(idx) else MLP(cfg.hidden_size, cfg.intermediate_size)
        self.drop = nn.Dropout(dropout)

    def forward(self, h, cos, sin, mode):
        a, aux = self.self_attn(self.input_layernorm(h), cos, sin, mode)
        h = h + self.drop(a)
        f = self.mlp(self.post_attention_layernorm(h))
        load = None
        if isinstance(f, tuple):
            f, load = f
        h = h + self.drop(f)
        return h, aux, load


class SharedHead(nn.Module):
    def __init__(self, cfg: DSAConfig):
        super().__init__()
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.head = linear(cfg.hidden_size, cfg.vocab_size)


class MTPLayer(DecoderLayer):
    """SPEC 6.5: h' = eh_proj(concat(enorm(emb(t)), hnorm(h))) -> block -> shared_head.norm -> head."""

    def __init__(self, cfg: DSAConfig, idx: int, dropout: float):
        super().__init__(cfg, idx, dropout)
        self.enorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.eh_proj = linear(2 * cfg.hidden_size, cfg.hidden_size)
        self.shared_head = SharedHead(cfg)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)

    def mtp_forward(self, tok, h, cos, sin, mode):
        x = self.eh_proj(torch.cat((self.enorm(self.embed_tokens(tok)), self.hnorm(h)), -1))  # embedding first
        x, aux, load = DecoderLayer.forward(self, x, cos, sin, mode)
        return self.shared_head.head(self.shared_head.norm(x)), aux, load


class Body(nn.Module):
    def __init__(self, cfg: DSAConfig, dropout: float):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        L = cfg.num_hidden_layers
        self.layers = nn.ModuleList([DecoderLayer(cfg, i, dropout) for i in range(L)] +
                                    [MTPLayer(cfg, L + j, dropout) for j in range(cfg.num_nextn_predict_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class DSAForCausalLM(nn.Module):
    def __init__(self, cfg: DSAConfig, dropout: float = 0.0, max_pos: int = 4096, tie_mtp: bool = True):
        super().__init__()
        assert cfg.num_nextn_predict_layers == 1
        self.cfg = cfg
        self.model = Body(cfg, dropout)
        self.lm_head = linear(cfg.hidden_size, cfg.vocab_size)
        self.drop = nn.Dropout(dropout)
        cos, sin = rope_tables(cfg, max_pos)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()
        if tie_mtp:  # DeepSeek-V3 shares embedding and output head with the MTP module
            self.mtp.embed_tokens.weight = self.model.embed_tokens.weight
            self.mtp.shared_head.head.weight = self.lm_head.weight

    @property
    def mtp(self) -> MTPLayer:
        return self.model.layers[self.cfg.num_hidden_layers]

    def reset_parameters(self):
        std = self.cfg.initializer_range
        n_res = 2 * (self.cfg.num_hidden_layers + 1)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(n_res) if name.endswith(("o_proj.weight", "down_proj.weight")) else std
                nn.init.normal_(p, 0.0, s)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            else:
                nn.init.ones_(p)

    def indexer_parameters(self):
        return [p for n, p in self.named_parameters() if ".indexer." in n]

    def moe_layers(self) -> List[MoE]:
        return [l.mlp for l in self.model.layers if isinstance(l.mlp, MoE)]

    def forward(self, ids: torch.Tensor, mode: str = "dense", mtp: bool = True):
        """ids [B, T+1]. Main rows t<T predict ids[:, t+1]; MTP rows i<T-1 take (ids[:, i+1], h_i) and
        predict ids[:, i+2]. Returns dict of losses/stats (scalars) and per-MoE-layer loads."""
        inp, tgt = ids[:, :-1], ids[:, 1:]
        B, T = inp.shape
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        h = self.drop(self.model.embed_tokens(inp))
        aux_losses, loads = [], []
        for layer in self.model.layers[: self.cfg.num_hidden_layers]:
            h, aux, load = layer(h, cos, sin, mode)
            if aux is not None:
                aux_losses.append(aux)
            if load is not None:
                loads.append(load)
        hn = self.model.norm(h)
        logits = self.lm_head(hn).float()
        out = {"loss_main": F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1)),
               "acc_main": (logits.argmax(-1) == tgt).float().mean()}
        if mtp:
            ml, aux, load = self.mtp.mtp_forward(inp[:, 1:], hn[:, :-1], cos[: T - 1], sin[: T - 1], mode)
            ml = ml.float()
            mt = tgt[:, 1:]
            out["loss_mtp"] = F.cross_entropy(ml.reshape(-1, ml.shape[-1]), mt.reshape(-1))
            out["acc_mtp"] = (ml.argmax(-1) == mt).float().mean()
            if aux is not None:
                aux_losses.append(aux)
            if load is not None:
                loads.append(load)
        out["loss_indexer"] = torch.stack(aux_losses).sum() if aux_losses else torch.zeros((), device=ids.device)
        out["loads"] = loads
        return out

    @torch.no_grad()
    def update_router_bias(self, loads: List[torch.Tensor], gamma: float):
        """Aux-loss-free balancing: bias += gamma * sign(mean load - load)."""
        for moe, load in zip(self.moe_layers(), loads):
            b = moe.gate.e_score_correction_bias
            b += gamma * torch.sign(load.mean() - load).to(b.dtype)
