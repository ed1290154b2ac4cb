#!/usr/bin/env python3
"""Fine-tune the shipped tiny model's MTP layer by self-distillation on its own target.

A draft is accepted when it agrees with the target: greedily, when it is the target's argmax; sampled,
with probability 1 - TV(p_target, p_draft). Training on the corpus (train.py: cross-entropy of the data's
token two ahead, weight 0.3) teaches the MTP layer the data, not the target, and leaves it at 0.55
first-draft acceptance on the README prompt. Here the target is frozen and the MTP layer learns the target's
own next-token distribution:

  MTP row i takes (t_{i+1}, h_i) as in training (h_i the target's final-norm hidden state) and is pulled
  towards p_target(. | t_<=i+1), the target's distribution at row i + 1: KL(p_target || p_mtp) in fp32,
  plus the MTP indexer's KL on its selected set (sparse top-k attention, as train.py's stage C); and
  depth 2 of the draft chain (SPEC 6.5 post_norm: (t_{i+2}, m_i) at position i + 1, attending to the
  depth-1 keys at positions <= i and its own) towards the target at row i + 2 (--chain-weight).

Half the batches (--gen-fraction) come from an on-policy pool: corpus prompts continued by the target's
own greedy tokens (--gen-seconds to make it, before training). Served greedy decoding meets exactly such
text, and its contexts are not the corpus's (the README prompt's continuation repeats itself); the
held-out score is the mean over held-out corpus windows and held-out greedy continuations.

Only the MTP layer's own weights train (enorm, hnorm, eh_proj, its attention and indexer, its MoE with
the aux-loss-free bias update, shared_head.norm); its embedding and head are the target's copies
(SPEC 8.2, tied in DeepSeek-V3) and stay. Every target tensor of the output file is the input's, byte
for byte (asserted), so d = 0 decoding and every target logit are unchanged. The held-out greedy match
(MTP argmax == target argmax at the next row) picks the kept state; the starting state is a candidate.

  python3 tools/distill_mtp.py --model models/tiny-dsa --out runs/distill          # device
  /usr/bin/python3 tools/distill_mtp.py --smoke --model models/tiny-dsa --out /tmp/d # CPU, seconds

Writes OUT/model.safetensors (the whole folder's tensors, MTP ones replaced), OUT/distill_log.txt and
OUT/distill_curve.json; --write-model also replaces MODEL/model.safetensors.
"""
import argparse
import copy
import json
import os
import shutil
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsa_ref import st_io  # noqa: E402
from dsa_ref.config import DSAConfig  # noqa: E402
from dsa_ref.model import DecoderLayer, DSAForCausalLM, MoE  # noqa: E402
from dsa_ref.tokenizer import load_tokenizer  # noqa: E402
from train import Log, cosine_lr, tokenize_file  # noqa: E402


def mtp_prefix(cfg):
    return f"model.layers.{cfg.num_hidden_layers}."


def is_trained(cfg, name):
    """The MTP layer's own tensors: not its embedding or head, which are the target's copies."""
    p = mtp_prefix(cfg)
    return name.startswith(p) and name not in (p + "embed_tokens.weight", p + "shared_head.head.weight")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/tiny-dsa")
    ap.add_argument("--corpus-dir", default="data/corpus")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--bias-gamma", type=float, default=5e-4)
    ap.add_argument("--mode", default="sparse", choices=("sparse", "dense"),
                    help="depth 1's attention (the target's is sparse, as served)")
    ap.add_argument("--chain-weight", type=float, default=1.0, help="depth 2's KL weight (0: depth 1 only)")
    ap.add_argument("--evals", type=int, default=12, help="held-out evaluations over the run")
    ap.add_argument("--seconds", type=float, default=150.0, help="wall-clock guard on the training loop")
    ap.add_argument("--gen-seconds", type=float, default=40.0,
                    help="time for the on-policy pool: the target's own greedy continuations (0: none)")
    ap.add_argument("--gen-prompt", type=int, default=32, help="corpus tokens before each continuation")
    ap.add_argument("--gen-len", type=int, default=224, help="greedy tokens per continuation")
    ap.add_argument("--gen-batch", type=int, default=128)
    ap.add_argument("--gen-fraction", type=float, default=0.5, help="share of the batches from the pool")
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--write-model", action="store_true", help="replace MODEL/model.safetensors")
    ap.add_argument("--smoke", action="store_true", help="CPU: small data, a few steps")
    a = ap.parse_args()

    os.makedirs(a.out, exist_ok=True)
    log = Log(os.path.join(a.out, "distill_log.txt"))
    torch.manual_seed(a.seed)
    dev = torch.device("cuda" if torch.cuda.is_available() and not a.smoke else "cpu")
    max_bytes = 0
    if a.smoke:
        a.ctx, a.batch, a.steps, a.evals, max_bytes = 160, 2, 4, 2, 60_000
        a.gen_seconds, a.gen_prompt, a.gen_len, a.gen_batch = min(a.gen_seconds, 1.0), 8, 12, 2
    cfg = DSAConfig.load(os.path.join(a.model, "config.json"))
    tok = load_tokenizer(os.path.join(a.model, "tokenizer.json"))
    bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
    train = tokenize_file(tok, os.path.join(a.corpus_dir, "train.txt"), max_bytes, bos)
    valid = tokenize_file(tok, os.path.join(a.corpus_dir, "valid.txt"), max_bytes // 3, bos)
    T = a.ctx
    V_windows = torch.stack([valid[i:i + T + 1] for i in range(0, valid.numel() - T - 1, T)])
    if a.smoke:
        V_windows = V_windows[:2]
    log(f"[data] train {train.numel()} tokens, valid {V_windows.shape[0]} windows of {T}; device {dev}; "
        f"torch {torch.__version__}")

    src = os.path.join(a.model, "model.safetensors")
    shipped = st_io.load(src)
    model = DSAForCausalLM(cfg, dropout=0.0, max_pos=max(T + 8, 4096))
    missing, unexpected = model.load_state_dict(shipped, strict=False)
    assert not missing and not unexpected, (missing[:5], unexpected[:5])
    p = mtp_prefix(cfg)  # the tied copies must equal the target's, or tying would change the target
    assert torch.equal(shipped[p + "embed_tokens.weight"], shipped["model.embed_tokens.weight"])
    assert torch.equal(shipped[p + "shared_head.head.weight"], shipped["lm_head.weight"])
    model.to(dev)
    for layer in model.model.layers[: cfg.num_hidden_layers]:
        layer.self_attn.indexer_loss = False  # frozen: its indexer KL would be computed for nothing
    params = []
    for name, prm in model.named_parameters():
        prm.requires_grad_(is_trained(cfg, name))
        if prm.requires_grad:
            params.append(prm)
    log(f"[model] {sum(x.numel() for x in params)} trained parameters (the MTP layer's own), "
        f"{sum(x.numel() for x in model.parameters())} in all")
    mtp = model.mtp
    mtp_moe = mtp.mlp if isinstance(mtp.mlp, MoE) else None
    amp = dev.type == "cuda"
    if amp:
        torch.backends.cuda.matmul.allow_tf32 = True

    def target(ids):
        """The frozen target: final-norm hidden states and fp32 logits of ids[:, :-1]."""
        inp = ids[:, :-1]
        n = inp.shape[1]
        cos, sin = model.rope_cos[:n], model.rope_sin[:n]
        with torch.no_grad(), torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
            h = model.model.embed_tokens(inp)
            for layer in model.model.layers[: cfg.num_hidden_layers]:
                h, _, _ = layer(h, cos, sin, "sparse")  # as served
            hn = model.model.norm(h)
            logits = model.lm_head(hn).float()
        return hn, logits

    def mtp_chain(ids, hn):
        """Depth 1 as training and inference run it, and depth 2 as the draft chain runs it.

        Depth 1, row i (position i): (t_{i+1}, h_i) -> logits and the post-norm output m_i.
        Depth 2, row i (position i + 1): (t_{i+2}, m_i), SPEC 6.5's post_norm chain; its attention sees
        the depth-1 keys at positions <= i (the draft extend's cache) and its own key, as a chain decode
        does. Dense attention there (exact up to index_topk visible positions)."""
        inp = ids[:, :-1]
        n = inp.shape[1]
        cos, sin = model.rope_cos[: n - 1], model.rope_sin[: n - 1]
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
            x1 = mtp_input(inp[:, 1:], hn[:, :-1])
            out1, aux, load = DecoderLayer.forward(mtp, x1, cos, sin, a.mode)
            m1 = mtp.shared_head.norm(out1)
            ml1 = mtp.shared_head.head(m1)
            if a.chain_weight <= 0:
                return ml1.float(), None, aux, load
            _, k1, v1, _ = mtp.self_attn.qkv(mtp.input_layernorm(x1), cos, sin)
            x2 = mtp_input(inp[:, 2:], m1[:, :-1])
            q2, k2, v2, _ = mtp.self_attn.qkv(mtp.input_layernorm(x2), model.rope_cos[1: n - 1],
                                 model.rope_sin[1: n - 1])
            scale = cfg.sm_scale
            # Scores and probabilities in fp32 (autocast would round the scores to bf16; SDPA, which
            # depth 1 runs, keeps them in fp32).
            with torch.autocast(device_type=dev.type, enabled=False):
                s1 = torch.matmul(q2.float(), k1.float().transpose(-1, -2)) * scale  # [B,H,n-2,n-1]
                seen = torch.ones(n - 2, n - 1, dtype=torch.bool, device=x1.device).tril()
                s1 = s1.masked_fill(~seen, float("-inf"))
                s_self = (q2.float() * k2.float()).sum(-1, keepdim=True) * scale
                prob = torch.softmax(torch.cat((s1, s_self), -1), -1)
                o = torch.matmul(prob[..., :-1], v1.float()) + prob[..., -1:] * v2.float()
            B, H = o.shape[0], o.shape[1]
            o = o.to(x2.dtype).transpose(1, 2).reshape(B, n - 2, H * cfg.v_head_dim)
            h2 = x2 + mtp.self_attn.o_proj(o)
            f = mtp.mlp(mtp.post_attention_layernorm(h2))
            f = f[0] if isinstance(f, tuple) else f
            ml2 = mtp.shared_head.head(mtp.shared_head.norm(h2 + f))
        return ml1.float(), ml2.float(), aux, load

    def mtp_input(tok, h):
        return mtp.eh_proj(torch.cat((mtp.enorm(mtp.embed_tokens(tok)), mtp.hnorm(h)), -1))

    def kl(ml, want):
        return F.kl_div(F.log_softmax(ml, -1).flatten(0, 1), F.log_softmax(want, -1).flatten(0, 1),
                        log_target=True, reduction="batchmean")

    def losses(ids):
        hn, tl = target(ids)
        ml1, ml2, aux, load = mtp_chain(ids, hn)
        want1 = tl[:, 1:]  # the target at row i + 1 is what depth-1 row i's draft meets
        o = {"kl": kl(ml1, want1), "aux": aux, "load": load,
             "match": (ml1.argmax(-1) == want1.argmax(-1)).float().mean(),
             "data": (ml1.argmax(-1) == ids[:, 2:]).float().mean()}
        if ml2 is not None:
            want2 = tl[:, 2:]  # depth-2 row i meets the target at row i + 2
            o["kl2"] = kl(ml2, want2)
            o["match2"] = (ml2.argmax(-1) == want2.argmax(-1)).float().mean()
        return o

    def score(ev):
        """Expected drafts accepted of the first two, were the depths independent."""
        return ev["match"] * (1 + ev.get("match2", 0.0))

    @torch.no_grad()
    def evaluate_on(windows, bs):
        mtp.eval()
        sums, n = {}, 0
        for i in range(0, windows.shape[0], bs):
            ids = windows[i:i + bs].to(dev)
            o = losses(ids)
            for k in ("kl", "match", "data", "kl2", "match2"):
                if k in o:
                    sums[k] = sums.get(k, 0.0) + float(o[k]) * ids.shape[0]
            n += ids.shape[0]
        mtp.train()
        return {k: v / n for k, v in sums.items()}

    gen = torch.Generator().manual_seed(a.seed)

    @torch.no_grad()
    def continue_greedily(text, count, seconds):
        """The on-policy pool: `count` corpus prompts of --gen-prompt tokens, each continued by the
        target's greedy tokens (sparse attention, as served) for --gen-len tokens; stops early at
        `seconds`. A draft on the README prompt meets the target's own continuation, which training on
        the corpus alone never shows the MTP layer."""
        P, L, out, t_start = a.gen_prompt, a.gen_len, [], time.time()
        while sum(x.shape[0] for x in out) < count and time.time() - t_start < seconds:
            bs = min(a.gen_batch, count - sum(x.shape[0] for x in out))
            idx = torch.randint(0, text.numel() - P - 1, (bs,), generator=gen)
            seqs = torch.stack([text[i:i + P] for i in idx.tolist()]).to(dev)
            for _ in range(L):
                _, logits = target(torch.cat((seqs, seqs[:, -1:]), 1))  # target() drops the last id
                seqs = torch.cat((seqs, logits[:, -1].argmax(-1, keepdim=True)), 1)
            out.append(seqs.cpu())
        return torch.cat(out) if out else torch.empty(0, P + L, dtype=torch.long)

    pool, pool_valid = None, None
    if a.gen_seconds > 0 and a.gen_fraction > 0:
        t_gen = time.time()
        pool_valid = continue_greedily(valid, max(2, a.gen_batch // 2), a.gen_seconds / 4)
        pool = continue_greedily(train, 1 << 30, a.gen_seconds)
        log(f"[pool] {pool.shape[0]} training and {pool_valid.shape[0]} held-out continuations of "
            f"{a.gen_len} greedy tokens after {a.gen_prompt} corpus tokens ({time.time() - t_gen:.0f}s)")
    gen_bs = max(1, a.batch * T // (a.gen_prompt + a.gen_len))

    trained_named = [(n, prm) for n, prm in model.named_parameters() if prm.requires_grad]

    def round_to_shipped():
        """The trained weights as the file will hold them (bf16), in place."""
        with torch.no_grad():
            for n, prm in trained_named:
                prm.copy_(prm.to(shipped[n].dtype).to(prm.dtype))

    def evaluate():
        """The held-out figures of the weights as they would ship; the fp32 masters are kept."""
        saved = [prm.detach().clone() for _, prm in trained_named]
        round_to_shipped()
        ev = {"corpus": evaluate_on(V_windows, a.batch)}
        if pool_valid is not None and pool_valid.shape[0]:
            ev["greedy"] = evaluate_on(pool_valid, gen_bs)
        with torch.no_grad():
            for (_, prm), x in zip(trained_named, saved):
                prm.copy_(x)
        return ev

    def total(ev):
        """The selection score: the mean over the held-out sets (corpus text, greedy continuations)."""
        return sum(score(x) for x in ev.values()) / len(ev)

    def fmt_one(ev):
        two = f", depth 2 {ev['match2']:.4f} KL {ev['kl2']:.4f}" if "match2" in ev else ""
        return (f"match {ev['match']:.4f} data {ev['data']:.4f} KL {ev['kl']:.4f}{two} score {score(ev):.4f}")

    def fmt(ev):
        return " | ".join(f"{k}: {fmt_one(v)}" for k, v in ev.items()) + f" | total {total(ev):.4f}"

    def batch():
        if pool is not None and pool.shape[0] and torch.rand((), generator=gen) < a.gen_fraction:
            idx = torch.randint(0, pool.shape[0], (gen_bs,), generator=gen)
            return pool[idx].to(dev, non_blocking=True)
        idx = torch.randint(0, train.numel() - T - 1, (a.batch,), generator=gen)
        return torch.stack([train[i:i + T + 1] for i in idx.tolist()]).to(dev, non_blocking=True)

    @torch.no_grad()
    def check_chain(ids):
        """Depth 2's row i equals the MTP block run plainly over [depth-1 rows 0..i, the depth-2 row]."""
        hn, _ = target(ids)
        _, ml2, _, _ = mtp_chain(ids, hn)
        inp = ids[:, :-1]
        n = inp.shape[1]
        x1 = mtp_input(inp[:, 1:], hn[:, :-1])
        m1 = mtp.shared_head.norm(DecoderLayer.forward(mtp, x1, model.rope_cos[: n - 1],
                                                       model.rope_sin[: n - 1], a.mode)[0])
        for i in (0, 5, n - 3):
            x2 = mtp_input(inp[:, i + 2: i + 3], m1[:, i: i + 1])
            seq = torch.cat((x1[:, : i + 1], x2), 1)
            out = DecoderLayer.forward(mtp, seq, model.rope_cos[: i + 2], model.rope_sin[: i + 2], "dense")[0]
            plain = mtp.shared_head.head(mtp.shared_head.norm(out[:, -1])).float()
            err = float((plain - ml2[:, i]).abs().max())
            assert err < 1e-3, (i, err)
        log(f"[check] depth 2 equals the plain block over the draft extend's keys (rows 0, 5, {n - 3})")

    if a.smoke and not amp and a.chain_weight > 0:
        check_chain(V_windows[:1].to(dev))
    model.eval()  # no dropout anywhere (built with 0); the target's norms and routers are frozen
    mtp.train()
    ev0 = evaluate()
    log(f"[start] held-out (match: MTP argmax = target argmax; data: = the corpus token): {fmt(ev0)}")
    best, best_state = total(ev0), copy.deepcopy(mtp.state_dict())
    curve = [{"step": 0, "t": 0.0, **ev0}]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=a.weight_decay)
    t0, tokens, run_kl, next_eval = time.time(), 0, None, 1
    warmup = min(50, a.steps // 10 + 1)
    for step in range(a.steps):
        # The schedule runs on steps or on the wall clock, whichever is further along, so a run cut
        # by --seconds still ends at the floor.
        done = max(step / a.steps, (time.time() - t0) / a.seconds)
        lr = cosine_lr(int(done * a.steps), a.steps, a.lr, warmup) if step >= warmup else \
            cosine_lr(step, a.steps, a.lr, warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        ids = batch()
        o = losses(ids)
        loss = o["kl"] + a.chain_weight * o.get("kl2", 0.0) + (o["aux"] if o["aux"] is not None else 0.0)
        load = o["load"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if mtp_moe is not None and load is not None and a.bias_gamma > 0:
            with torch.no_grad():
                b = mtp_moe.gate.e_score_correction_bias
                b += a.bias_gamma * torch.sign(load.mean() - load).to(b.dtype)
        tokens += ids.numel()
        run_kl = float(o["kl"]) if run_kl is None else 0.9 * run_kl + 0.1 * float(o["kl"])
        elapsed = time.time() - t0
        last = step == a.steps - 1 or elapsed > a.seconds
        progress = max((step + 1) / a.steps, elapsed / a.seconds)
        if progress >= next_eval / a.evals or last:
            next_eval = int(progress * a.evals) + 1
            ev = evaluate()
            curve.append({"step": step + 1, "t": round(elapsed, 1), "lr": lr, "train_kl": run_kl, **ev})
            mark = ""
            if total(ev) > best:
                best, best_state, mark = total(ev), copy.deepcopy(mtp.state_dict()), " *"
            log(f"[distill] step {step + 1}/{a.steps} lr {lr:.2e} | train KL {run_kl:.4f} | held-out {fmt(ev)} | "
                f"{elapsed:.0f}s {tokens / max(elapsed, 1e-9) / 1e3:.0f}k tok/s{mark}")
        if elapsed > a.seconds:
            log(f"[distill] wall-clock guard ({a.seconds:.0f}s) reached at step {step + 1}")
            break
    mtp.load_state_dict(best_state)
    round_to_shipped()
    evF = evaluate()
    log(f"[final] held-out {fmt(evF)}")
    log(f"[final] (start   {fmt(ev0)})")

    trained = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    out_tensors, changed = {}, 0
    for name, t in shipped.items():
        if is_trained(cfg, name):
            new = trained[name].to(t.dtype).contiguous()
            assert new.shape == t.shape, name
            changed += int(not torch.equal(new, t))
            out_tensors[name] = new
        else:
            out_tensors[name] = t
    dst = os.path.join(a.out, "model.safetensors")
    how = st_io.save(out_tensors, dst, metadata={"format": "pt"})
    back = st_io.load(dst)
    assert set(back) == set(shipped)
    for name, t in shipped.items():  # the target, bit for bit
        if not is_trained(cfg, name):
            assert torch.equal(back[name], t), name
    log(f"[export] {dst} (writer {how}): {changed} MTP tensors changed, every other tensor identical")
    with open(os.path.join(a.out, "distill_curve.json"), "w") as f:
        json.dump({"args": vars(a), "curve": curve, "start": ev0, "final": evF}, f, indent=1)
    if a.write_model:
        shutil.copyfile(dst, src)
        log(f"[export] replaced {src}")


if __name__ == "__main__":
    main()
