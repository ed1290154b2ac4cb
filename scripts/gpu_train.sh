#!/usr/bin/env bash
# Runs the tiny model's training on the lent H200 (tools/run_training.sh) under a time cap, then
# bundles the model folder, the goldens and the logs into $OUT as <= 15 MB parts (the device
# returns at most 8 files of 16 MiB). Reassemble here with: cat bundle.tgz.part-* | tar xz
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
mkdir -p "$out"
work=/tmp/dsa-train
mkdir -p "$work"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$work/gpu.txt" 2>&1
timeout "${DSA_TRAIN_SECONDS:-530}" bash tools/run_training.sh "$work" "$@" >"$work/stdout.log" 2>&1
echo "run_training rc=$?" >>"$work/stdout.log"
rm -f "$work/ckpt.pt"
tar czf /tmp/bundle.tgz models/tiny-dsa testdata/tiny-dsa "$work" 2>/dev/null
split -b 15M /tmp/bundle.tgz "$out/bundle.tgz.part-"
cp "$work/stdout.log" "$out/stdout.log"
tail -40 "$work/stdout.log"
ls -la models/tiny-dsa testdata/tiny-dsa 2>&1
