#!/usr/bin/env bash
# A next-stop call (carry [".deps"]): why the greedy draft, one CTA over 6144 logits, takes 4.9 us
# between two MTP decodes, and why the cluster acceptance makes the next one take 8.5 (RESULTS,
# stop 48). ncu on `dsa generate` d = 3 (README prompt, graphs on: the acceptance kernels are
# stream launches between the graphs), a few steady launches of each acceptance kernel, with
# launch, occupancy, speed-of-light, warp-state and scheduler sections; each way of
# DSA_ACCEPT_CLUSTER.
set -u
. scripts/device_call.sh
call_begin call_profile
call_build dsa
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
[ -n "$ncu_bin" ] || { echo "no ncu here"; exit 2; }
for c in on off; do
  DSA_ACCEPT_CLUSTER=$c timeout 200 "$ncu_bin" --kernel-name regex:acceptance --launch-skip 40 \
    --launch-count 8 --section LaunchStats --section Occupancy --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats \
    build-gpu/dsa/cli/dsa generate --model models/tiny-dsa --prompt "And the king said unto" \
    --device cuda --max-new-tokens 48 --speculative-algorithm NEXTN --speculative-num-steps 3 \
    >"$W/ncu_cluster_$c.txt" 2>&1
  echo "ncu cluster $c rc=$?: $(grep -cE '^  [a-z_]+.*\(' "$W/ncu_cluster_$c.txt") kernels"
  grep -E "acceptance_sample_kernel|Duration|Stall Long|Stall Barrier|Registers Per|Shared Memory Config" \
    "$W/ncu_cluster_$c.txt" | head -40
  bundle
done
echo "all done $(el) s"
