#!/usr/bin/env bash
# Stop 49, call 2 (carry [".deps"]): why the kernels between a d = 3 step's forwards take what
# they take (RESULTS stop 48: the greedy draft, one CTA over 6144 logits, 4.9 us; the 4-row
# acceptance 10.3; the step commit 2.1-4.8). ncu on `dsa generate` d = 3 (README prompt, graphs
# on: these kernels are stream launches between the graphs), caches and clocks left as they run
# (--cache-control none --clock-control none), a few steady launches of each, with the launch,
# occupancy, speed-of-light, warp-state and source-counter sections. The cluster acceptance both
# ways (DSA_ACCEPT_CLUSTER on / off).
set -u
. scripts/device_call.sh
call_begin call2_profile
call_build dsa
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
[ -n "$ncu_bin" ] || { echo "no ncu here"; exit 2; }
gen=(build-gpu/dsa/cli/dsa generate --model models/tiny-dsa --prompt "And the king said unto"
  --device cuda --max-new-tokens 48 --speculative-algorithm NEXTN --speculative-num-steps 3)
sections=(--section LaunchStats --section Occupancy --section SpeedOfLight
  --section WarpStateStats --section SchedulerStats --section SourceCounters)
for c in on off; do
  DSA_ACCEPT_CLUSTER=$c timeout 150 "$ncu_bin" --cache-control none --clock-control none \
    --kernel-name regex:"acceptance|step_commit|copy_word_runs|pinned_copy" --launch-skip 60 \
    --launch-count 16 "${sections[@]}" "${gen[@]}" >"$W/ncu_cluster_$c.txt" 2>&1
  echo "ncu cluster $c rc=$?"
  grep -E "^  [a-z_]+.*\(|Duration|Registers Per|Static Shared|Achieved Occ" \
    "$W/ncu_cluster_$c.txt" | head -80
  bundle
done
# The greedy kernel alone, its SASS: how much of sample_row's non-greedy code it carries.
cuobjdump -sass build-gpu/dsa/cli/dsa 2>/dev/null |
  awk '/Function : /{on = /acceptance_sample_kernel/} on' >"$W/acceptance_sass.txt"
echo "acceptance SASS lines: $(wc -l <"$W/acceptance_sass.txt")"
bundle
echo "all done $(el) s"
