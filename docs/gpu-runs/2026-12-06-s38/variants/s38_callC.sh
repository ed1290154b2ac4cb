#!/usr/bin/env bash
# Session 38 call C: the softmax trims without the FFMA fold (smx2) and with the score
# warpgroup's own P . V from registers (smx2rs), against HEAD and FlashMLA; ncu on base; then
# the V3.2 decode-equivalent, the README-prompt bench and the engine bench.
set -u
export T0=$(date +%s)
VARIANTS="smx2 smx2rs warpown allvalid" DEFAULT_MODE="base smx2rs warpown allvalid" NCU_VARIANTS="base" bash .scratch/s37_var.sh 2>&1 | grep -v "^$" | grep -v "^anchor\|^bench"
bash .scratch/s38_callB.sh
