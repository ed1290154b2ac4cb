#!/usr/bin/env python3
"""Train the tiny DSA + MTP model (DeepSeek-V3.2 recipe at toy scale).

Stages
  A dense    main model + MTP layer jointly on LM + mtp_weight * MTP loss (MTP row i: (emb(t_{i+1}), h_i)
             -> t_{i+2}); cosine LR; evaluated every --eval-every steps; the best validation checkpoint is kept.
  B warmup   everything frozen except the indexers (MTP's included); KL(dense attention summed over heads,
             L1-normalised || softmax(index logits)).
  C sparse   top-k (index_topk) sparse attention everywhere; model on LM + MTP loss, indexers on the KL
             restricted to the selected set (indexer inputs detached); the best sparse validation kept.

  python3 tools/train.py --out runs/tiny                      # device (CUDA, bf16 autocast)
  /usr/bin/python3 tools/train.py --smoke --out /tmp/smoke      # CPU smoke test, seconds

Writes OUT/ckpt.pt (fp32 state_dict + config), OUT/train_log.txt, OUT/train_curve.json.
"""
import argparse
import copy
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsa_ref.config import DSAConfig  # noqa: E402
from dsa_ref.model import DSAForCausalLM  # noqa: E402
from dsa_ref.tokenizer import load_tokenizer, write_bytelevel_tokenizer  # noqa: E402


class Log:
    def __init__(self, path):
        self.f = open(path, "w")

    def __call__(self, msg):
        print(msg, flush=True)
        self.f.write(msg + "\n")
        self.f.flush()


def tokenize_file(tok, path, max_bytes, bos):
    with open(path, encoding="utf-8") as f:
        text = f.read(max_bytes) if max_bytes else f.read()
    docs = [d for d in text.split("\n\n") if d.strip()]
    enc = tok.encode_batch(docs) if hasattr(tok, "encode_batch") else [tok.encode(d) for d in docs]
    out = []
    for ids in enc:
        out.append(bos)
        out.extend(ids)
    return torch.tensor(out, dtype=torch.long)


def cosine_lr(step, total, peak, warmup, floor=0.1):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus-dir", default="data/corpus")
    ap.add_argument("--tokenizer", default="models/tiny-dsa/tokenizer.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default=None, help="config.json to start from (default: SPEC 8.1 tiny column)")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--sparse-batch", type=int, default=32)
    ap.add_argument("--dense-epochs", type=float, default=16.0)
    ap.add_argument("--warmup-steps", type=int, default=200, help="stage B (indexer warm-up) steps")
    ap.add_argument("--sparse-epochs", type=float, default=3.0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--idx-lr", type=float, default=2e-3)
    ap.add_argument("--sparse-lr", type=float, default=3e-4)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--bias-gamma", type=float, default=1e-3, help="router bias update speed (aux-loss-free)")
    ap.add_argument("--evals-per-epoch", type=float, default=2.0)
    ap.add_argument("--stage-seconds", type=str, default="150,60,180", help="wall-clock guard per stage A,B,C")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (falls back to eager on failure)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--smoke", action="store_true", help="CPU smoke test: tiny data, a few steps per stage")
    a = ap.parse_args()

    os.makedirs(a.out, exist_ok=True)
    log = Log(os.path.join(a.out, "train_log.txt"))
    torch.manual_seed(a.seed)
    dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() and not a.smoke else "cpu"))
    cfg = DSAConfig.load(a.config) if a.config else DSAConfig()
    max_bytes = 0
    stage_s = [float(x) for x in a.stage_seconds.split(",")]
    if a.smoke:
        a.ctx, a.batch, a.sparse_batch = 160, 2, 2
        max_bytes = 60_000
        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    if not os.path.exists(a.tokenizer):
        if not a.smoke:
            sys.exit(f"tokenizer {a.tokenizer} missing (run tools/train_tokenizer.py)")
        a.tokenizer = os.path.join(a.out, "tokenizer.json")
        write_bytelevel_tokenizer(a.tokenizer, cfg.vocab_size)
    tok = load_tokenizer(a.tokenizer)
    bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
    assert bos == cfg.bos_token_id

    t0 = time.time()
    train = tokenize_file(tok, os.path.join(a.corpus_dir, "train.txt"), max_bytes, bos)
    valid = tokenize_file(tok, os.path.join(a.corpus_dir, "valid.txt"), max_bytes // 3, bos)
    assert int(train.max()) < cfg.vocab_size
    log(f"[data] train {train.numel()} tokens, valid {valid.numel()} tokens ({time.time() - t0:.1f}s); device {dev}; "
        f"torch {torch.__version__}")
    T = a.ctx
    V_windows = torch.stack([valid[i:i + T + 1] for i in range(0, valid.numel() - T - 1, T)])
    if a.smoke:
        V_windows = V_windows[:2]

    model = DSAForCausalLM(cfg, dropout=a.dropout, max_pos=max(T + 8, 4096)).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"[model] {n_params} trainable parameters (MTP embed/head tied); ctx {T}")
    amp = dev.type == "cuda"
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    fwd = {"f": model}
    if a.compile:
        try:
            fwd["f"] = torch.compile(model)
            log("[model] torch.compile enabled")
        except Exception as e:  # noqa: BLE001
            log(f"[model] torch.compile unavailable ({e}); eager")

    def run(ids, mode):
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
            try:
                return fwd["f"](ids, mode=mode)
            except Exception as e:  # noqa: BLE001
                if fwd["f"] is model:
                    raise
                log(f"[model] compiled forward failed ({type(e).__name__}: {str(e)[:200]}); falling back to eager")
                fwd["f"] = model
                return model(ids, mode=mode)

    gen = torch.Generator().manual_seed(a.seed)

    def batch(bs):
        idx = torch.randint(0, train.numel() - T - 1, (bs,), generator=gen)
        return torch.stack([train[i:i + T + 1] for i in idx.tolist()]).to(dev, non_blocking=True)

    @torch.no_grad()
    def evaluate(mode, bs):
        model.eval()
        sums = {"loss_main": 0.0, "loss_mtp": 0.0, "acc_main": 0.0, "acc_mtp": 0.0}
        n = 0
        for i in range(0, V_windows.shape[0], bs):
            ids = V_windows[i:i + bs].to(dev)
            o = run(ids, mode)
            for k in sums:
                sums[k] += float(o[k]) * ids.shape[0]
            n += ids.shape[0]
        model.train()
        return {k: v / n for k, v in sums.items()}

    curve = []
    steps_per_epoch = max(1, train.numel() // (a.batch * T))
    sparse_spe = max(1, train.numel() // (a.sparse_batch * T))

    def fmt(ev):
        return (f"valid {ev['loss_main']:.4f} ppl {math.exp(ev['loss_main']):.2f} mtp {ev['loss_mtp']:.4f} "
                f"acc {ev['acc_main']:.3f}/{ev['acc_mtp']:.3f}")

    def train_stage(name, mode, params, total, peak, bs, spe, loss_fn, eval_mode, warmup, budget, select_on):
        opt = torch.optim.AdamW(params, lr=peak, betas=(0.9, 0.95), weight_decay=a.weight_decay)
        ev_every = max(1, int(spe / a.evals_per_epoch)) if not a.smoke else max(1, total // 2)
        best, best_state = None, None
        if select_on is not None:  # the stage's starting point is a candidate too
            best = select_on
            best_state = copy.deepcopy(model.state_dict())
        t_start, tok_count, run_loss = time.time(), 0, {}
        for step in range(total):
            lr = cosine_lr(step, total, peak, warmup)
            for g in opt.param_groups:
                g["lr"] = lr
            ids = batch(bs)
            o = run(ids, mode)
            loss = loss_fn(o)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            if mode != "warmup" and a.bias_gamma > 0:
                model.update_router_bias(o["loads"], a.bias_gamma)
            tok_count += ids.numel()
            for k in ("loss_main", "loss_mtp", "loss_indexer"):
                run_loss[k] = run_loss.get(k, 0.0) * 0.9 + float(o[k]) * 0.1 if step else float(o[k])
            elapsed = time.time() - t_start
            last = step == total - 1 or elapsed > budget
            if (step + 1) % ev_every == 0 or last:
                ev = evaluate(eval_mode, bs)
                rec = {"stage": name, "step": step + 1, "epoch": round((step + 1) / spe, 3), "lr": lr,
                       "train": {k: round(v, 4) for k, v in run_loss.items()},
                       "valid": {k: round(v, 4) for k, v in ev.items()}, "t": round(elapsed, 1)}
                curve.append(rec)
                score = ev["loss_main"] if name != "warmup" else run_loss["loss_indexer"]
                mark = ""
                if best is None or score < best:
                    best, best_state, mark = score, copy.deepcopy(model.state_dict()), " *"
                log(f"[{name}] step {step + 1}/{total} ep {rec['epoch']:.2f} lr {lr:.2e} | train {run_loss['loss_main']:.4f} "
                    f"mtp {run_loss['loss_mtp']:.4f} idx {run_loss['loss_indexer']:.4f} | {fmt(ev)} | {elapsed:.0f}s "
                    f"{tok_count / max(elapsed, 1e-9) / 1e3:.0f}k tok/s{mark}")
            if elapsed > budget:
                log(f"[{name}] wall-clock guard ({budget:.0f}s) reached at step {step + 1}")
                break
        model.load_state_dict(best_state)
        return best

    mw = a.mtp_weight
    all_params = [p for p in model.parameters()]
    idx_params = model.indexer_parameters()
    idx_ids = {id(p) for p in idx_params}
    main_params = [p for p in all_params if id(p) not in idx_ids]

    # ---- A: dense --------------------------------------------------------------------------
    tA = time.time()
    totA = 3 if a.smoke else max(1, int(a.dense_epochs * steps_per_epoch))
    log(f"[dense] {totA} steps of {a.batch}x{T} ({steps_per_epoch} steps/epoch), lr {a.lr}")
    train_stage("dense", "dense", main_params, totA, a.lr, a.batch, steps_per_epoch,
                lambda o: o["loss_main"] + mw * o["loss_mtp"], "dense", warmup=min(30, totA // 10 + 1),
                budget=stage_s[0], select_on=None)
    evA = evaluate("dense", a.batch)
    log(f"[dense] best: {fmt(evA)} ({time.time() - tA:.0f}s)")

    # ---- B: indexer warm-up ----------------------------------------------------------------
    tB = time.time()
    for p in main_params:
        p.requires_grad_(False)
    model.eval()  # no dropout: the KL target is the clean dense distribution
    totB = 2 if a.smoke else a.warmup_steps
    train_stage("warmup", "warmup", idx_params, totB, a.idx_lr, a.sparse_batch, sparse_spe,
                lambda o: o["loss_indexer"], "sparse", warmup=min(20, totB // 10 + 1), budget=stage_s[1],
                select_on=None)
    model.train()
    for p in main_params:
        p.requires_grad_(True)
    evB = evaluate("sparse", a.sparse_batch)
    log(f"[warmup] sparse after warm-up: {fmt(evB)} ({time.time() - tB:.0f}s)")

    # ---- C: sparse training ----------------------------------------------------------------
    tC = time.time()
    totC = 2 if a.smoke else max(1, int(a.sparse_epochs * sparse_spe))
    train_stage("sparse", "sparse", all_params, totC, a.sparse_lr, a.sparse_batch, sparse_spe,
                lambda o: o["loss_main"] + mw * o["loss_mtp"] + o["loss_indexer"], "sparse",
                warmup=min(20, totC // 10 + 1), budget=stage_s[2], select_on=evB["loss_main"])
    evS = evaluate("sparse", a.sparse_batch)
    evD = evaluate("dense", a.sparse_batch)
    log(f"[final] sparse {fmt(evS)} ({time.time() - tC:.0f}s)")
    log(f"[final] dense  {fmt(evD)}")
    log(f"[final] sparse/dense PPL ratio {math.exp(evS['loss_main'] - evD['loss_main']):.4f}")
    state = {k: v.detach().float().cpu() if v.is_floating_point() else v.cpu() for k, v in model.state_dict().items()}
    torch.save({"config": cfg.to_dict(), "state_dict": state, "tokenizer": os.path.abspath(a.tokenizer),
                "final": {"sparse": evS, "dense": evD, "dense_stage": evA, "after_warmup": evB}},
               os.path.join(a.out, "ckpt.pt"))
    with open(os.path.join(a.out, "train_curve.json"), "w") as f:
        json.dump({"args": vars(a), "curve": curve, "final": {"sparse": evS, "dense": evD}}, f, indent=1)
    log(f"[done] {os.path.join(a.out, 'ckpt.pt')}")


if __name__ == "__main__":
    main()
