#!/usr/bin/env bash
# The one command for the device: tokenizer (if needed) -> train -> export -> goldens.
#
#   bash tools/run_training.sh OUTDIR [--retok] [--smoke] [extra train.py args...]
#
# Reads data/corpus/{train,valid}.txt (made by tools/corpus/prepare.sh and carried to the device).
# Real run: tokenizer + model into models/tiny-dsa/, goldens into testdata/tiny-dsa/golden.json,
# logs + checkpoint into OUTDIR.  --smoke: CPU, byte-level tokenizer, everything under OUTDIR
# (nothing written to models/ or testdata/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUTDIR="${1:?usage: run_training.sh OUTDIR [--retok] [--smoke] [train.py args]}"
shift
RETOK=0; SMOKE=0; EXTRA=()
for arg in "$@"; do
  case "$arg" in
    --retok) RETOK=1 ;;
    --smoke) SMOKE=1 ;;
    *) EXTRA+=("$arg") ;;
  esac
done
PY="${PYTHON:-python3}"
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
T0=$(date +%s)
stamp() { echo "[run_training] $(( $(date +%s) - T0 ))s: $*" | tee -a "$OUTDIR/run_training.log"; }
test -f data/corpus/train.txt || { echo "data/corpus/train.txt missing: run tools/corpus/prepare.sh" >&2; exit 1; }

if [ "$SMOKE" = 1 ]; then
  MODEL="$OUTDIR/model"; GOLDEN="$OUTDIR/golden.json"; SMK=(--smoke)
else
  MODEL="models/tiny-dsa"; GOLDEN="testdata/tiny-dsa/golden.json"; SMK=()
fi
mkdir -p "$MODEL"
"$PY" -c 'import torch, sys; print("[run_training] python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' | tee -a "$OUTDIR/run_training.log"

if [ ! -f "$MODEL/tokenizer.json" ] || [ "$RETOK" = 1 ]; then
  stamp "tokenizer"
  "$PY" tools/train_tokenizer.py --corpus data/corpus/train.txt --out "$MODEL/tokenizer.json" "${SMK[@]}" 2>&1 | tee -a "$OUTDIR/run_training.log"
fi
stamp "train"
"$PY" tools/train.py --tokenizer "$MODEL/tokenizer.json" --out "$OUTDIR" "${SMK[@]}" ${EXTRA[@]+"${EXTRA[@]}"}
stamp "export"
"$PY" tools/export_hf.py --ckpt "$OUTDIR/ckpt.pt" --tokenizer "$MODEL/tokenizer.json" --out "$MODEL" 2>&1 | tee -a "$OUTDIR/run_training.log"
stamp "golden"
"$PY" tools/golden.py --model "$MODEL" --heldout testdata/heldout.txt --out "$GOLDEN" "${SMK[@]}" 2>&1 | tee "$OUTDIR/golden_log.txt"
cp "$GOLDEN" "$OUTDIR/golden.json" 2>/dev/null || true
cp "$MODEL/config.json" "$OUTDIR/config.json"
stamp "done (model in $MODEL, golden in $GOLDEN, logs in $OUTDIR)"
