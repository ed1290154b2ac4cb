#!/usr/bin/env python3
"""Fine-tune the shipped tiny model's MTP layer by self-distillation on its own target.

A draft is accepted when it agrees with the target: greedily, when it is the target's argmax; sampled,
with probability 1 - TV(p_target, p_draft). Training on the corpus (train.py: cross-entropy of the data's
token two ahead, weight 0.3) teaches the MTP layer the data, not the target, and leaves it at 0.55
first-draft acceptance on the README prompt. Here the target is frozen and the MTP layer learns the target's
own next-token distribution:

  MTP row i takes (t_{i+1}, h_i) as in training (h_i the target's final-norm hidden state) and is pulled
  towards p_target(. | t_<=i+1), the target's distribution at row i + 1: KL(p_target || p_mtp) in fp32,
  plus the MTP indexer's KL on its selected set (sparse top-k attention, as train.py's stage C).

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
import math
import os
import shutil
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsa_ref import st_io  # noqa: E402
from dsa_ref.config import DSAConfig  # noqa: E402
from dsa_ref.model import DSAForCausalLM, MoE  # noqa: E402
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
    ap.add_argument("--mode", default="sparse", choices=("sparse", "dense"))
    ap.add_argument("--evals", type=int, default=12, help="held-out evaluations over the run")
    ap.add_argument("--seconds", type=float, default=150.0, help="wall-clock guard on the training loop")
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
                h, _, _ = layer(h, cos, sin, a.mode)
            hn = model.model.norm(h)
            logits = model.lm_head(hn).float()
        return hn, logits

    def mtp_rows(ids, hn):
        inp = ids[:, :-1]
        n = inp.shape[1]
        cos, sin = model.rope_cos[: n - 1], model.rope_sin[: n - 1]
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
            ml, aux, load = mtp.mtp_forward(inp[:, 1:], hn[:, :-1], cos, sin, a.mode)
        return ml.float(), aux, load

    def losses(ids):
        hn, tl = target(ids)
        ml, aux, load = mtp_rows(ids, hn)
        want = tl[:, 1:]  # the target at row i + 1 is what MTP row i's draft meets
        kl = F.kl_div(F.log_softmax(ml, -1).flatten(0, 1), F.log_softmax(want, -1).flatten(0, 1),
                      log_target=True, reduction="batchmean")
        match = (ml.argmax(-1) == want.argmax(-1)).float().mean()
        data = (ml.argmax(-1) == ids[:, 2:]).float().mean()
        return kl, aux, load, match, data

    @torch.no_grad()
    def evaluate():
        mtp.eval()
        sums, n = {"kl": 0.0, "match": 0.0, "data": 0.0}, 0
        for i in range(0, V_windows.shape[0], a.batch):
            ids = V_windows[i:i + a.batch].to(dev)
            kl, _, _, match, data = losses(ids)
            for k, v in (("kl", kl), ("match", match), ("data", data)):
                sums[k] += float(v) * ids.shape[0]
            n += ids.shape[0]
        mtp.train()
        return {k: v / n for k, v in sums.items()}

    gen = torch.Generator().manual_seed(a.seed)

    def batch():
        idx = torch.randint(0, train.numel() - T - 1, (a.batch,), generator=gen)
        return torch.stack([train[i:i + T + 1] for i in idx.tolist()]).to(dev, non_blocking=True)

    model.eval()  # no dropout anywhere (built with 0); the target's norms and routers are frozen
    mtp.train()
    ev0 = evaluate()
    log(f"[start] held-out: MTP argmax = target argmax {ev0['match']:.4f}, = data {ev0['data']:.4f}, "
        f"KL {ev0['kl']:.4f}")
    best, best_state = ev0["match"], copy.deepcopy(mtp.state_dict())
    curve = [{"step": 0, "t": 0.0, **ev0}]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=a.weight_decay)
    every = max(1, a.steps // a.evals)
    t0, tokens, run_kl = time.time(), 0, None
    warmup = min(50, a.steps // 10 + 1)
    for step in range(a.steps):
        lr = cosine_lr(step, a.steps, a.lr, warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        ids = batch()
        kl, aux, load, match, _ = losses(ids)
        loss = kl + (aux if aux is not None else 0.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if mtp_moe is not None and load is not None and a.bias_gamma > 0:
            with torch.no_grad():
                b = mtp_moe.gate.e_score_correction_bias
                b += a.bias_gamma * torch.sign(load.mean() - load).to(b.dtype)
        tokens += ids.numel()
        run_kl = float(kl) if run_kl is None else 0.9 * run_kl + 0.1 * float(kl)
        elapsed = time.time() - t0
        last = step == a.steps - 1 or elapsed > a.seconds
        if (step + 1) % every == 0 or last:
            ev = evaluate()
            curve.append({"step": step + 1, "t": round(elapsed, 1), "lr": lr, "train_kl": run_kl, **ev})
            mark = ""
            if ev["match"] > best:
                best, best_state, mark = ev["match"], copy.deepcopy(mtp.state_dict()), " *"
            log(f"[distill] step {step + 1}/{a.steps} lr {lr:.2e} | train KL {run_kl:.4f} batch match "
                f"{float(match):.3f} | held-out match {ev['match']:.4f} data {ev['data']:.4f} KL {ev['kl']:.4f} | "
                f"{elapsed:.0f}s {tokens / max(elapsed, 1e-9) / 1e3:.0f}k tok/s{mark}")
        if elapsed > a.seconds:
            log(f"[distill] wall-clock guard ({a.seconds:.0f}s) reached at step {step + 1}")
            break
    mtp.load_state_dict(best_state)
    evF = evaluate()
    log(f"[final] held-out match {evF['match']:.4f} (start {ev0['match']:.4f}), data {evF['data']:.4f} "
        f"(start {ev0['data']:.4f}), KL {evF['kl']:.4f} (start {ev0['kl']:.4f})")

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
