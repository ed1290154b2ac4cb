#!/usr/bin/env bash
# The next stop's first call (carry [".deps"]): build, then every gpu test — the whole-model ones
# verbose — with the used-part metadata upload of 7e1117a / 09a283d, which no GPU has run. On an
# H200 this is also issue 16's "every gpu test passes on the H200" for the landed tree.
set -u
. scripts/device_call.sh
call_begin call_tests
( while sleep 60; do bundle; done ) & keeper=$!
OUT=$W/check SKIP_V32=1 SKIP_BENCH=1 ENGINE_BENCH=0 SKIP_SAN=1 GPU_TEST_SECONDS=230 \
  timeout 570 scripts/gpu_check.sh 2>&1 | tail -24
grep -hE "teacher-forced:|divergences over" "$W/check/ctest_e2e.log" | head -12
kill $keeper; bundle; echo "all done $(el) s"
