#!/usr/bin/env bash
# Session 38 call A: softmax trim (smx), register-staged producers (regpe, ropeearly) and
# ropeearly + smx (resmx) against HEAD (base) and FlashMLA in one call; ncu on base.
set -u
VARIANTS="smx smxrs regpe ropeearly resmx" DEFAULT_MODE="base smx" NCU_VARIANTS="${NCU:-base}" bash .scratch/s37_var.sh 2>&1 | grep -v "^$"
