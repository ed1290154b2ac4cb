#!/usr/bin/env bash
# dsa's kernels side by side with the peer kernels, in one run on the lent H200 (issue 13 item 6).
# Copies nothing itself: expects the anchors kit (prebuilt DeepGEMM paged MQA logits, FlashMLA
# sparse FP8 decode and TensorRT-LLM indexer top-k benchmarks, shared/anchors) at ./.anchors,
# git-ignored and carried to the device, and .deps (scripts/fetch_gpu_deps.sh) for the build:
#   cp -r /work/shared/anchors .anchors; scripts/fetch_gpu_deps.sh     # here
#   run: scripts/bench_vs_peers.sh   carry: [".deps", ".anchors"]       # device
# Builds dsa's benchmarks in build-gpu (gpu_check.sh's directory and flags), runs the anchors and
# dsa's benchmarks at the same shapes with the same method (cold L2 by disjoint copies, 5 warm-ups,
# launch gaps hidden, CUDA events, median of 50: dsa/cuda/bench_cold.h), and prints one table.
# Writes to $OUT (or ./peers-out): env.txt, build.log, anchors.log, dsa.log, table.md.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
kit=.anchors
iters="${BENCH_ITERS:-50}"
[ -x "$kit/bin/deepgemm_paged_logits" ] || {
  echo "no anchors kit at ./$kit (copy /work/shared/anchors there and carry it)"
  exit 2
}
. scripts/gpu_build_env.sh
gpu_start bench_vs_peers peers-out
gpu_env "$out/env.txt"

phase "build (dsa benchmarks only)"
targets=(paged_logits_bench topk_bench sparse_mla_bench logits_schedule_bench)
if ! { gpu_configure "$build" &&
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"; } >"$out/build.log" 2>&1; then
  grep -E "error|FAILED" -A4 "$out/build.log" | head -60
  exit 1
fi
bin="$build/bench"

# The shapes of issue 13. DeepGEMM's SM90 kernel has next_n 1 and 2 only: its n = 4 runs flattened
# (2B requests of next_n 2, KV streamed twice; the anchor does this itself); n = 3 and 8 are dsa's.
dg_shapes=("B=128,L=32K,n=1" "B=128,L=32K,n=2" "B=128,L=32K,n=4" "B=128,L=64K,n=1" "B=128,L=64K,n=2" "B=128,L=64K,n=4" "B=32,L=8K,n=1" "B=32,L=8K,n=4")
dsa_pl_shapes=("${dg_shapes[@]}" "B=128,L=32K,n=3" "B=128,L=32K,n=8" "B=128,L=64K,n=3" "B=128,L=64K,n=8")
# Top-k: the anchor's default list, which holds issue 13's 32x8K, 128x32K and 32x64K.
tk_shapes=("rows=32,L=8K" "rows=32,L=32K" "rows=32,L=64K" "rows=128,L=32K" "rows=128,L=64K" "rows=4,L=128K" "rows=32,L=128K" "rows=256,L=128K")
fm_shapes=("b=32,s_q=1" "b=32,s_q=2" "b=32,s_q=4" "b=128,s_q=1" "b=128,s_q=2" "b=128,s_q=4")
sa() {  # sa SHAPE...: the argument list "--shape S ... --iters N" in the array SA
  SA=()
  for s in "$@"; do SA+=(--shape "$s"); done
  SA+=(--iters "$iters")
}

run() {  # run LOG SECONDS CMD...: one program, bounded, output appended to LOG
  local log=$1 secs=$2
  shift 2
  echo "=== $*" >>"$log"
  local s
  s=$(date +%s)
  timeout -k 5 "$secs" "$@" >>"$log" 2>&1
  local rc=$?
  echo "=== rc=$rc seconds=$(($(date +%s) - s)) $1" >>"$log"
  [ "$rc" -eq 0 ] || echo "FAILED rc=$rc: $*"
}

phase "anchors"
: >"$out/anchors.log"
sa "${dg_shapes[@]}"
run "$out/anchors.log" 60 "$kit/bin/deepgemm_paged_logits" "${SA[@]}"
sa "${tk_shapes[@]}"
run "$out/anchors.log" 60 "$kit/bin/trtllm_indexer_topk" "${SA[@]}"
sa "${fm_shapes[@]}"
run "$out/anchors.log" 60 "$kit/bin/flashmla_sparse_decode" "${SA[@]}"
grep -E '^check .*status=FAIL|^done ' "$out/anchors.log"

phase "dsa"
: >"$out/dsa.log"
# One process per shape, each capped: on stop 52's H100 the one-process run stalled at
# B=128 L=64K n=2 past its 100 s cap and lost every shape after it.
for s in "${dsa_pl_shapes[@]}"; do
  sa "$s"
  run "$out/dsa.log" 25 "$bin/paged_logits_bench" "${SA[@]}"
done
sa "${tk_shapes[@]}"
run "$out/dsa.log" 60 "$bin/topk_bench" "${SA[@]}"
sa "${fm_shapes[@]}"
run "$out/dsa.log" 60 "$bin/sparse_mla_bench" "${SA[@]}"
# The schedule build has no peer-mode shapes: its own bench (eager and graph-replay launches,
# synchronised per call, so the figure includes a launch latency the other lines hide).
run "$out/dsa.log" 20 "$bin/logits_schedule_bench"

phase "table"
python3 - "$out/anchors.log" "$out/dsa.log" >"$out/table.md" <<'EOF'
import re, sys

def lines(path, key):
    rows = []
    for line in open(path, errors="replace"):
        if not line.startswith(key + "="):
            continue
        kv = dict(t.split("=", 1) for t in line.split() if "=" in t)
        rows.append(kv)
    return rows

anchors = lines(sys.argv[1], "anchor")
dsa = lines(sys.argv[2], "bench")
sched = {}
for line in open(sys.argv[2], errors="replace"):
    m = re.match(r"logits_schedule B_pad=(\d+)\s+n=(\d+)\s+G=(\d+)\s+eager\s+([\d.]+) us\s+graph\s+([\d.]+) us", line)
    if m and m.group(3) == "132":
        sched[(int(m.group(1)), int(m.group(2)))] = (float(m.group(4)), float(m.group(5)))

def find(table, name, **keys):
    for r in table:
        if r.get(name[0]) == name[1] and all(r.get(k) == str(v) for k, v in keys.items()):
            return r
    return None

def f(x, nd=1):
    return "—" if x is None else f"{x:.{nd}f}"

def kshape(L):
    return f"{L // 1024}K" if L % 1024 == 0 else str(L)

out = []
out.append("| op | shape | dsa µs | peer µs | peer | speed-up (peer/dsa) | dsa roof_frac | peer roof_frac | note |")
out.append("|---|---|---|---|---|---|---|---|---|")

def row(op, shape, d, p_us, peer, note=""):
    d_us = float(d["us"]) if d else None
    roof = float(d["roof_us"]) if d else None
    sp = p_us / d_us if (d_us and p_us) else None
    out.append(f"| {op} | {shape} | {f(d_us)} | {f(p_us)} | {peer if p_us else '—'} | "
               f"{f(sp, 2) + '×' if sp else '—'} | {f(d_us and roof / d_us, 3) if d else '—'} | "
               f"{f(roof / p_us, 3) if (p_us and roof) else '—'} | {note} |")

pl = [(128, 32768), (128, 65536), (32, 8192)]
for B, L in pl:
    for n in (1, 2, 3, 4, 8):
        d = find(dsa, ("bench", "dsa_paged_logits"), B=B, L=L, n=n)
        if not d:
            continue
        a = find(anchors, ("anchor", "deepgemm_paged_logits"), B=B, L=L, n=n)
        note = "DeepGEMM flattened (2B × next_n 2, kv_reads=2)" if n == 4 else ("no DeepGEMM SM90 kernel for this n" if n in (3, 8) else "")
        row("paged logits", f"B{B} L{kshape(L)} n{n}", d, float(a["us"]) if a else None, "DeepGEMM", note)
# "+ schedule launch": dsa kernel + its schedule build vs DeepGEMM kernel + its metadata kernel,
# each the sum of two medians.
for B, L in pl:
    for n in (1, 2, 4):
        d = find(dsa, ("bench", "dsa_paged_logits"), B=B, L=L, n=n)
        a = find(anchors, ("anchor", "deepgemm_paged_logits"), B=B, L=L, n=n)
        m = find(anchors, ("anchor", "deepgemm_paged_logits_meta"), B=B, L=L, n=n)
        s = sched.get((128, 4) if B >= 128 else (32, 1))
        if not (d and a and m and s):
            continue
        dd = dict(d)
        dd["us"] = str(float(d["us"]) + s[0])
        row("paged logits + schedule launch", f"B{B} L{kshape(L)} n{n}", dd,
            float(a["us"]) + float(m["us"]), "DeepGEMM + metadata",
            f"sums of medians: dsa schedule {s[0]:.1f} µs (B_pad {128 if B >= 128 else 32} n {4 if B >= 128 else 1}, eager), DG metadata {float(m['us']):.1f} µs")
for kv in ((128, 4), (32, 1)):
    s = sched.get(kv)
    m = find(anchors, ("anchor", "deepgemm_paged_logits_meta"), B=kv[0], L=8192 if kv[0] == 32 else 32768, n=kv[1])
    if s:
        out.append(f"| schedule / metadata build | B{kv[0]} n{kv[1]} | {s[0]:.1f} (graph {s[1]:.1f}) | {f(float(m['us'])) if m else '—'} | DeepGEMM metadata | "
                   f"{f(float(m['us']) / s[0], 2) + '×' if m else '—'} | — | — | dsa: per-call sync, launch latency included |")
for r in [x for x in anchors if x.get("anchor") == "trtllm_indexer_topk"]:
    d = find(dsa, ("bench", "dsa_topk"), rows=r["rows"], L=r["L"], k=r["k"])
    st = find(dsa, ("bench", "dsa_topk_stream"), rows=r["rows"], L=r["L"], k=r["k"])
    op = find(dsa, ("bench", "dsa_topk_onepass"), rows=r["rows"], L=r["L"], k=r["k"])
    parts = [f"dsa path {d['path']} × {d.get('cluster', '1')} CTA/row"] if d else []
    if st:
        parts.append(f"dsa stream kernel {float(st['us']):.1f} µs")
    if op:
        parts.append(f"dsa one-pass kernel {float(op['us']):.1f} µs ({op.get('cluster', '?')} CTA/row)")
    parts.append(f"TRT-LLM path {r.get('path', '?')}")
    note = "; ".join(parts)
    row("top-k k=2048", f"{r['rows']}×{kshape(int(r['L']))}", d, float(r["us"]), "TensorRT-LLM", note)
for b in (32, 128):
    for sq in (1, 2, 4):
        d = find(dsa, ("bench", "dsa_sparse_mla_decode"), b=b, s_q=sq)
        a = find(anchors, ("anchor", "flashmla_sparse_fp8_decode"), b=b, s_q=sq)
        if not (d or a):
            continue
        note = f"FlashMLA main {a['main_us']} + combine {a['combine_us']} µs" if a else ""
        row("sparse MLA decode FP8-656", f"b{b} s_q{sq}", d, float(a["us"]) if a else None, "FlashMLA", note)
print("\n".join(out))
print()
print("speed-up = peer µs / dsa µs (> 1: dsa faster). roof_frac = §10 lower bound max(bytes / 4.28 TB/s,"
      " FLOPs / peak) ÷ measured µs, peak fp8 1500 TFLOP/s for paged logits, bf16 805 for sparse MLA,"
      " bytes only for top-k; the peer's fraction uses dsa's bound of the same shape.")
EOF
cat "$out/table.md"
grep -h "gate=timed_out" "$out/dsa.log" && echo "WARNING: a gate timed out (launch gaps not hidden there)"
phase "done"
