#!/usr/bin/env bash
# Checkpoint load speed on the GPU machine's own disk (issue 16: >= 2 GB/s): `dsa make-checkpoint`
# writes a full-width V3.2-layout FP8 checkpoint (the decode-equivalent config: 8 routed experts,
# top-8; LAYERS layers, sharded with an index), its pages are dropped from the page cache
# (posix_fadvise DONTNEED after fsync, so the load reads the disk, not memory), then
# `dsa generate --device cuda` loads it (memory-mapped, streamed to the device through the
# staging ring) and prints "loaded checkpoint: N tensors, X GB in S s, R GB/s", with one reader
# per chunk, with READERS, and with READERS but no shard read-ahead. A second load of the same files (now in the page cache) shows the
# loader's own ceiling.
# Usage: scripts/bench_load.sh BUILD_DIR [OUT_DIR]   LAYERS=10 SHARDS=16 CKPT_DIR=(temp dir)
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: bench_load.sh BUILD_DIR [OUT_DIR]}"
out="${2:-$(mktemp -d)}"
mkdir -p "$out"
dsa="$build/dsa/cli/dsa"
ck="${CKPT_DIR:-$(mktemp -d)/v32-load}"
rm -rf "$ck"
t0=$(date +%s.%N)
"$dsa" make-checkpoint --config testdata/deepseek-v3.2/config.json --out "$ck" \
  --num-hidden-layers "${LAYERS:-10}" --n-routed-experts 8 --set n_group=1 --set topk_group=1 \
  --fp8 --shards "${SHARDS:-16}" --seed 3 --tokenizer-from models/tiny-dsa --max-gb 60 \
  >"$out/make_checkpoint.log" 2>&1 || { echo "make-checkpoint failed"; tail -5 "$out/make_checkpoint.log"; exit 1; }
echo "make-checkpoint: $(du -sh "$ck" | cut -f1) in $(python3 -c "import time; print(f'{time.time() - $t0:.1f}')") s, $(ls "$ck"/*.safetensors | wc -l) shards"
evict() {
  python3 - "$ck" <<'PY'
import os, sys
for name in os.listdir(sys.argv[1]):
    fd = os.open(os.path.join(sys.argv[1], name), os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PY
}
sync
# What the disk itself gives (the bound on a cold load): every shard read once with READERS readers
# at a time (1: one stream; 8: the queue depth parallel readers give), the page cache dropped
# before each pass.
for readers in 1 8 16; do
  evict
  t1=$(date +%s.%N)
  ls "$ck"/*.safetensors | xargs -P "$readers" -I{} dd if={} of=/dev/null bs=16M status=none
  echo "disk, $readers reader(s): $(python3 -c "import os,time; b=sum(os.path.getsize(os.path.join('$ck',f)) for f in os.listdir('$ck')); print(f'{b/1e9:.2f} GB in {time.time()-$t1:.2f} s, {b/1e9/(time.time()-$t1):.2f} GB/s')")"
done
# The loader: one reader per chunk, READERS (default 8), and READERS without the shard read-ahead
# (model/shard_read_ahead.h); each cold (page cache dropped first), then again warm (the files in
# the page cache: the loader's own ceiling).
for config in "1" "${READERS:-8}" "${READERS:-8} --disable-load-read-ahead"; do
  set -- $config
  threads=$1
  shift
  tag="$threads${1:+_no_read_ahead}"
  for pass in cold warm; do
    [ "$pass" = cold ] && evict
    "$dsa" generate --model "$ck" --device cuda --prompt "load" --max-new-tokens 1 \
      --context-length 256 --max-running-requests 1 --progress --load-threads "$threads" "$@" \
      >"$out/load_${pass}_$tag.log" 2>&1
    echo "$pass, --load-threads $threads $* (rc $?): $(grep -m1 "loaded checkpoint" "$out/load_${pass}_$tag.log" || tail -3 "$out/load_${pass}_$tag.log")"
  done
done
rm -rf "$ck"
