#!/usr/bin/env bash
# Session 37: FP8 dequantisation variants of the sparse MLA kernel (and ablations), side by side
# with HEAD and FlashMLA in one call. Variants are whole copies of sparse_mla_wgmma.cuh in
# .scratch/var/, built one after another into the same build dir.
set -u
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s); ph() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
H=dsa/kernels/sparse_mla/sparse_mla_wgmma.cuh
cp $H /tmp/orig.cuh
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > $OUT/cfg.log 2>&1
mkdir -p /tmp/bin
build() {  # name targets...
  local n=$1; shift
  cmake --build build-gpu -j16 --target "$@" > $OUT/build_$n.log 2>&1 || { echo "BUILD FAIL $n"; grep -E "error" $OUT/build_$n.log | head; return 1; }
  for t in "$@"; do cp $(find build-gpu -name $t -type f -executable | head -1) /tmp/bin/${n}_$t; done
}
build base sparse_mla_bench sparse_mla_cuda_test; ph "base built"
for v in ${VARIANTS:-prmt hmul regstage regprmt reghmul nodeq nocopy neither}; do
  cp .scratch/var/$v.cuh $H
  case $v in no*|neither) build $v sparse_mla_bench;; *) build $v sparse_mla_bench sparse_mla_cuda_test;; esac
done
cp /tmp/orig.cuh $H
ph "variants built"
for t in /tmp/bin/*_sparse_mla_cuda_test; do
  DSA_CHECKED=1 timeout 100 $t --gtest_brief=1 > $OUT/test_$(basename $t).log 2>&1
  echo "$(basename $t) rc=$? $(grep -E 'PASSED|FAILED' $OUT/test_$(basename $t).log | head -3 | tr '\n' ' ')"
done
ph "tests"
S="--shape b=32,s_q=1 --shape b=32,s_q=2 --shape b=32,s_q=4 --shape b=128,s_q=1 --shape b=128,s_q=2 --shape b=128,s_q=4"
for round in 1 2; do
  echo "FLASHMLA $(.scratch/flashmla_sparse_decode $S --iters 30 2>&1 | tee -a $OUT/peer_flashmla.log | grep '^anchor=flashmla_sparse_fp8_decode ' | awk '{printf "%s ", $6}')"
  for b in /tmp/bin/*_sparse_mla_bench; do
    n=$(basename $b _sparse_mla_bench)
    echo "$n $($b $S --iters 30 2>&1 | tee -a $OUT/peer_$n.log | grep '^bench' | awk '{printf "%s ", $6}')"
  done
done
grep "^anchor" $OUT/peer_flashmla.log | head -6 | cut -c1-160
grep "^bench" $OUT/peer_base.log | head -6 | cut -c1-160
ph "peer rounds"
for n in ${DEFAULT_MODE:-base prmt hmul regstage regprmt reghmul}; do
  echo "--- default mode $n"; /tmp/bin/${n}_sparse_mla_bench 2>&1 | tee $OUT/default_$n.log | grep "^sparse_mla" | cut -c1-130
done
ph done
# Where the FP8 kernel's time goes (one launch, b 128 s_q 1): pipes, shared memory, stalls.
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for n in ${NCU_VARIANTS-base}; do
  timeout 90 $ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section InstructionStats -k regex:sparse_mla_wgmma -c 1 \
    /tmp/bin/${n}_sparse_mla_bench --shape b=128,s_q=1 --iters 30 > $OUT/ncu_$n.txt 2>&1
  rc=$?; echo "--- ncu $n rc=$rc ($ncu)"; [ $rc -ne 0 ] && tail -4 $OUT/ncu_$n.txt | cut -c1-200
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|Shared|Pipe|Issue Slots Busy|Issued Ipc|No Eligible|Warp Cycles Per Issued|Stall|L1/TEX Hit|L2 Hit|Bank" $OUT/ncu_$n.txt | head -40
done
ph ncu
