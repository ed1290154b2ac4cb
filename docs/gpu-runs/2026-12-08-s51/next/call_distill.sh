#!/usr/bin/env bash
# A next-stop call (stop 51 got no machine) (carry ["data/corpus", ".deps"]; data/corpus is made
# here by tools/corpus/prepare.sh): the tiny model's MTP layer fine-tuned by
# self-distillation on its frozen target (tools/distill_mtp.py; every target tensor byte-identical),
# the goldens regenerated from the new folder (tools/golden.py), both returned as <= 15 MB parts;
# then the README prompt d = 0 / 3 with the new model (the d = 0 run is the target alone, unchanged).
# Reassemble here: cat distill.tgz.part-* | tar xz  (models/tiny-dsa, testdata/tiny-dsa, logs)
set -u
. scripts/device_call.sh
call_begin call_distill
python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)'
timeout 250 python3 tools/distill_mtp.py --model models/tiny-dsa --out "$W/distill" \
  --gen-seconds "${GEN_SECONDS:-30}" --seconds "${DISTILL_SECONDS:-130}" --write-model \
  >"$W/distill.log" 2>&1
echo "distill rc=$?"; grep -E "^\[(pool|start|final|export)\]|\*$" "$W/distill.log" | tail -12
timeout 120 python3 tools/golden.py --model models/tiny-dsa --heldout testdata/heldout.txt \
  --out testdata/tiny-dsa/golden.json >"$W/golden.log" 2>&1
echo "golden rc=$?"; tail -3 "$W/golden.log"
rm -f "$W/distill/model.safetensors"
tar czf /tmp/distill.tgz models/tiny-dsa testdata/tiny-dsa -C /tmp call_distill
split -b 15M /tmp/distill.tgz "$OUT/distill.tgz.part-"
call_build dsa
REPEAT=3 timeout $((590 - $(el))) scripts/bench_readme.sh build-gpu >"$W/readme.log" 2>&1
cat "$W/readme.log"
for d in 0 3; do  # lossless: d = 3 (greedy verify on the argmax kernel, 4324284) emits d = 0's tokens
  f=(--device cuda --json --max-new-tokens 64)
  [ $d -gt 0 ] && f+=(--speculative-algorithm NEXTN --speculative-num-steps 3)
  build-gpu/dsa/cli/dsa generate --model models/tiny-dsa --prompt "And the king said unto" "${f[@]}" \
    2>/dev/null | grep token_ids | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["token_ids"])' >"$W/tokens_d$d.txt"
done
cmp -s "$W/tokens_d0.txt" "$W/tokens_d3.txt" && echo "README prompt: d = 3 tokens equal d = 0's" || echo "README prompt: d = 3 tokens DIFFER from d = 0's"
cp "$W/readme.log" "$OUT/readme.log"
if [ "$(el)" -lt 470 ]; then  # issue 15's table: the engine bench at batch 1 and 8, d = 0 and 3
  BATCHES="1 8" PROFILE=1 RUNS=on:device timeout $((590 - $(el))) scripts/bench_engine.sh build-gpu \
    >"$OUT/engine_bench.log" 2>&1
  cat "$OUT/engine_bench.log"
fi
echo "all done $(el) s"
