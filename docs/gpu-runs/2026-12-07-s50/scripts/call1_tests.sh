#!/usr/bin/env bash
# Stop 50, call 1 (s49 scripts/call1_tests.sh) (carry [".deps"]): every gpu test of this stop's last tree (the
# whole-model ones verbose), then the whole-model tests again with DSA_POISON_WORKSPACE=1, which
# now also fills every metadata region past a forward's used part with 0xA5A5A5A5 on the device
# (runtime/metadata_mirror.h set_poison): CUDA against CPU must hold with it. On an H200 this is
# issue 16's "every gpu test passes on the H200"; there `linear_bench fp8` gives the H200 GEMM
# table of the current code as well.
set -u
. scripts/device_call.sh
call_begin call1_tests
( while sleep 60; do bundle; done ) & keeper=$!
OUT=$W/check SKIP_V32=1 SKIP_BENCH=1 ENGINE_BENCH=0 SKIP_SAN=1 GPU_TEST_SECONDS=230 \
  timeout 420 scripts/gpu_check.sh 2>&1 | tail -20
grep -hE "teacher-forced:|divergences over" "$W/check/ctest_e2e.log" | head -12
t=$(find build-gpu -name pinned_copy_cuda_test -type f -executable | head -1)
DSA_COPY_PREFETCH=0 timeout 60 "$t" >"$W/pinned_copy_late_read.log" 2>&1
echo "pinned_copy_cuda_test, DSA_COPY_PREFETCH=0 (the late-read kernels): rc=$? $(grep -cE 'OK \]' "$W/pinned_copy_late_read.log") ok"
e2e='GraphReplay|EngineGraphs|TinyModelCuda|NarrowCheckpointCuda'
(cd build-gpu && DSA_POISON_WORKSPACE=1 timeout $((560 - $(el))) ctest -L gpu -R "$e2e" -j 4) \
  >"$W/ctest_e2e_poisoned.log" 2>&1
echo "poisoned whole-model tests: $(grep -E 'tests passed|tests failed' "$W/ctest_e2e_poisoned.log")"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ "$(el)" -lt 450 ]; then
  timeout $((590 - $(el))) build-gpu/bench/linear_bench fp8 1 4 32 128 4096 >"$W/linear_bench.log" 2>&1
  echo "linear_bench fp8 rc=$?"; tail -30 "$W/linear_bench.log"
fi
kill $keeper; bundle; echo "all done $(el) s"
