#!/usr/bin/env bash
# dsa serve --device cuda on the lent H200, once: the tiny model with MTP (d = 3), CUDA graphs,
# 64 concurrent streaming clients (scripts/serve_load.py), a short transcript, /metrics, SIGTERM.
# The binary comes from this checkout's build (scripts/pack_serve_for_gpu.sh; carry build/dsa/cli/dsa
# and build/serve-libs). Writes $OUT (or ./serve-out): serve.log, transcript.txt, load.json,
# metrics.txt.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out="${OUT:-serve-out}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/build/serve-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
port=31555
url="http://127.0.0.1:$port"
build/dsa/cli/dsa serve --device cuda --model models/tiny-dsa --port "$port" \
  --speculative-algorithm NEXTN --speculative-num-steps 3 --max-running-requests 32 \
  >"$out/serve.log" 2>&1 &
pid=$!
python3 - "$url" <<'PY' || { echo "server never became healthy"; tail -20 "$out/serve.log"; kill $pid; exit 1; }
import sys, time, urllib.request
for _ in range(240):
    try:
        if urllib.request.urlopen(sys.argv[1] + "/health", timeout=2).status == 200:
            sys.exit(0)
    except Exception:
        pass
    time.sleep(0.5)
sys.exit(1)
PY
python3 - "$url" >"$out/transcript.txt" 2>&1 <<'PY'
import json, sys, urllib.request
url = sys.argv[1]
def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=60).read().decode()
print("$ POST /v1/completions")
print(post("/v1/completions", {"prompt": "And the king said unto", "max_tokens": 16, "temperature": 0}))
print("$ POST /v1/chat/completions (stream)")
print(post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8,
                                    "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}))
PY
python3 scripts/serve_load.py --url "$url" --clients 64 --per-client 2 >"$out/load.json"
echo "load rc=$?"
cat "$out/load.json"
python3 -c "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1] + '/metrics').read().decode())" "$url" >"$out/metrics.txt"
kill -TERM $pid
wait $pid
echo "serve exit=$?"
grep -E "^dsa:(spec_accept_length|num_requests_running|kv_pages_free|generation_tokens_total) " "$out/metrics.txt"
tail -2 "$out/serve.log"
