#!/usr/bin/env bash
# `dsa serve` end to end on 127.0.0.1 with the tiny model (CPU):
#   - /health 503 while loading, then 200; /v1/models;
#   - a non-streamed completion's JSON shape; SSE framing (data: lines, [DONE]);
#   - greedy output through the server equals `dsa generate --json` (completion tokens and text),
#     streamed and not, with d = 0 and d = 3 (NEXTN, 3 steps);
#   - a client that disconnects mid-stream: its request is aborted, dsa:kv_pages_free returns to
#     its value before, the server goes on serving;
#   - malformed requests each get a 4xx with an OpenAI error body, and the server stays correct;
#   - overload (1 running + 2 queued): some 429 with Retry-After, the admitted ones complete;
#   - SIGTERM under load: exit 0;
#   - the official OpenAI Node client (openai_client_test.mjs, npm ci from package-lock.json).
# Usage: server_test.sh DSA_BINARY REPO_ROOT
set -u
dsa="$1"
root="$2"
# shellcheck source=tests/server/server_lib.sh
source "$root/tests/server/server_lib.sh"  # $model, $here, $tmp, ok, bad, start, stop_server, ...

# py CODE ARGS...: a Python check (stdin: the response); prints nothing on success.
py() { python3 -c "$@"; }

shape_completion='
import json, sys
r = json.load(sys.stdin)
assert r["id"].startswith("cmpl-"), r["id"]
assert r["object"] == "text_completion"
assert isinstance(r["created"], int) and r["model"] == "tiny-dsa"
c = r["choices"]
assert len(c) == 1 and c[0]["index"] == 0 and isinstance(c[0]["text"], str)
assert c[0]["finish_reason"] == "length" and c[0]["logprobs"] is None
u = r["usage"]
assert u["completion_tokens"] == 16 and u["total_tokens"] == u["prompt_tokens"] + 16
'
# sse_text: checks the framing of an SSE body on stdin and prints the joined text, the number of
# completion tokens from the usage chunk and the finish reason.
sse_text='
import json, sys
lines = sys.stdin.read().split("\n")
events = [l for l in lines if l]
assert all(l.startswith("data: ") or l.startswith(":") for l in events), events[:3]
data = [l[6:] for l in events if l.startswith("data: ")]
assert data[-1] == "[DONE]", data[-1]
assert "[DONE]" not in data[:-1]
text, usage, finish = "", None, None
for d in data[:-1]:
    j = json.loads(d)
    assert j["object"] in ("text_completion", "chat.completion.chunk"), j
    if j.get("usage"):
        usage = j["usage"]["completion_tokens"]
    for c in j["choices"]:
        text += c.get("text", "") or c.get("delta", {}).get("content", "") or ""
        finish = c["finish_reason"] or finish
print(json.dumps([text, usage, finish]))
'

prompt="And the king"
check_against_generate() {  # NAME GENERATE_ARGS...: greedy server output == dsa generate --json
  local name=$1
  shift
  local want got streamed
  want=$("$dsa" generate --model "$model" --prompt "$prompt" --max-new-tokens 24 --temperature 0 \
    --json "$@" 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    j = json.loads(line)
    if "index" in j:
        print(json.dumps([j["text"], j["completion_tokens"]]))')
  got=$(post /v1/completions "{\"prompt\": \"$prompt\", \"max_tokens\": 24, \"temperature\": 0}" |
    python3 -c 'import json, sys; r = json.load(sys.stdin); print(json.dumps([r["choices"][0]["text"], r["usage"]["completion_tokens"]]))')
  streamed=$(curl -sN --max-time 60 "$(url /v1/completions)" -d "{\"prompt\": \"$prompt\", \"max_tokens\": 24, \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}" |
    python3 -c "$sse_text" | python3 -c 'import json, sys; t, n, f = json.load(sys.stdin); print(json.dumps([t, n]))')
  if [ -n "$want" ] && [ "$want" = "$got" ] && [ "$want" = "$streamed" ]; then
    ok "$name: greedy output equals dsa generate --json: $want"
  else
    bad "$name: generate $want, server $got, streamed $streamed"
  fi
  generated=$want
}

# check_sampled NAME GENERATE_ARGS...: sampled output (temperature, top_p, top_k, seed, a stop
# string) through the server equals dsa generate with the same values: the parameters reach the
# engine unchanged.
check_sampled() {
  local name=$1
  shift
  local want got
  want=$("$dsa" generate --model "$model" --prompt "$prompt" --max-new-tokens 32 --temperature 0.8 \
    --top-p 0.9 --top-k 50 --seed 1234 --stop "Levites" --json "$@" 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    j = json.loads(line)
    if "index" in j:
        print(json.dumps([j["text"], j["completion_tokens"]]))')
  got=$(post /v1/completions "{\"prompt\": \"$prompt\", \"max_tokens\": 32, \"temperature\": 0.8, \"top_p\": 0.9, \"top_k\": 50, \"seed\": 1234, \"stop\": \"Levites\"}" |
    python3 -c 'import json, sys; r = json.load(sys.stdin); print(json.dumps([r["choices"][0]["text"], r["usage"]["completion_tokens"]]))')
  if [ -n "$want" ] && [ "$want" = "$got" ]; then
    ok "$name: sampled output (seed 1234) equals dsa generate: $want"
  else
    bad "$name: sampled: generate $want, server $got"
  fi
}

# concurrent N: N greedy requests at once (half streamed) all equal $generated: requests from many
# connections share the running batch (and wait for it) without changing their outputs.
concurrent() {
  local n=$1 i got same=0
  for i in $(seq 1 "$n"); do
    if ((i % 2)); then
      post /v1/completions "{\"prompt\": \"$prompt\", \"max_tokens\": 24, \"temperature\": 0}" |
        python3 -c 'import json, sys; r = json.load(sys.stdin); print(json.dumps([r["choices"][0]["text"], r["usage"]["completion_tokens"]]))' >"$tmp/conc$i" &
    else
      curl -sN --max-time 60 "$(url /v1/completions)" -d "{\"prompt\": \"$prompt\", \"max_tokens\": 24, \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}" |
        python3 -c "$sse_text" | python3 -c 'import json, sys; t, n, f = json.load(sys.stdin); print(json.dumps([t, n]))' >"$tmp/conc$i" &
    fi
  done
  wait_curls
  for i in $(seq 1 "$n"); do
    got=$(cat "$tmp/conc$i")
    [ "$got" = "$generated" ] && same=$((same + 1)) || echo "     request $i: $got"
  done
  [ "$same" = "$n" ] && ok "$n concurrent requests: each equals dsa generate" ||
    bad "$n concurrent requests: $same of $n equal dsa generate ($generated)"
}
wait_curls() { for j in $(jobs -p); do [ "$j" != "$pid" ] && wait "$j"; done; }

# --- d = 0: shapes, SSE, equality, disconnect, malformed requests --------------------------------
start plain --max-running-requests 4
out=$(timeout 30 "$dsa" serve --model "$model" --port "$port" 2>&1 >/dev/null)
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] && grep -q "port $port: cannot listen" <<<"$out" &&
  ok "a second server on the port is refused: $out" || bad "a second server on the port: rc $rc, $out"
models=$(curl -s "$(url /v1/models)")
py 'import json, sys; j = json.loads(sys.argv[1]); assert j["object"] == "list" and j["data"][0]["id"] == "tiny-dsa"' "$models" &&
  ok "/v1/models: $models" || bad "/v1/models: $models"

r=$(post /v1/completions "{\"prompt\": \"$prompt\", \"max_tokens\": 16, \"temperature\": 0}")
echo "$r" | py "$shape_completion" && ok "completion JSON shape: $r" || bad "completion JSON shape: $r"

chat=$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "temperature": 0}')
echo "$chat" | py '
import json, sys
r = json.load(sys.stdin)
assert r["id"].startswith("chatcmpl-") and r["object"] == "chat.completion"
assert r["choices"][0]["message"]["role"] == "assistant"
assert r["usage"]["completion_tokens"] <= 8' && ok "chat JSON shape" || bad "chat JSON shape: $chat"

sse=$(curl -sN --max-time 60 "$(url /v1/chat/completions)" -d '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}')
out=$(echo "$sse" | py "$sse_text") && ok "chat SSE framing: $out" || bad "chat SSE framing: $sse"
echo "$sse" | head -1 | grep -q '"delta":{"content":"","role":"assistant"}' &&
  ok "chat stream opens with the assistant role" || bad "chat stream's first chunk: $(echo "$sse" | head -1)"

check_against_generate "d = 0"
check_sampled "d = 0"

# Disconnect mid-stream: a long ignore_eos stream cut by curl's --max-time.
free_before=$(metric dsa:kv_pages_free)
aborts_before=$(metric 'dsa:num_requests_total{finish_reason="abort"}')
curl -sN --max-time 2 "$(url /v1/completions)" -d '{"prompt": "Once", "max_tokens": 1000, "ignore_eos": true, "stream": true}' >"$tmp/cut.txt" 2>/dev/null
grep -q '^data: ' "$tmp/cut.txt" && ok "the cut stream had started" || bad "the cut stream sent nothing"
free_after=""
for _ in $(seq 1 100); do
  free_after=$(metric dsa:kv_pages_free)
  [ "$free_after" = "$free_before" ] && [ "$(metric dsa:num_requests_running)" = 0 ] && break
  sleep 0.1
done
aborts_after=$(metric 'dsa:num_requests_total{finish_reason="abort"}')
if [ "$free_after" = "$free_before" ] && [ "${aborts_after%.*}" -gt "${aborts_before%.*}" ]; then
  ok "disconnect: request aborted, dsa:kv_pages_free back to $free_before"
else
  bad "disconnect: kv_pages_free $free_before -> $free_after, aborts $aborts_before -> $aborts_after"
fi

# Malformed requests: each a 4xx with {"error": {"message", "type", "param", "code"}}.
malformed() {  # EXPECTED_STATUS DESCRIPTION CURL_ARGS...
  local want=$1 what=$2 code body
  shift 2
  code=$(curl -s --max-time 30 -o "$tmp/err.json" -w '%{http_code}' "$@")
  body=$(head -c 300 "$tmp/err.json")
  if [ "$code" = "$want" ] && py '
import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert isinstance(e["message"], str) and e["message"] and isinstance(e["type"], str)
assert "param" in e and "code" in e' "$tmp/err.json" 2>/dev/null; then
    ok "$what -> $code $body"
  else
    bad "$what: wanted $want with an OpenAI error, got $code $body"
  fi
}
c=$(url /v1/completions)
h=(-H 'Content-Type: application/json')
malformed 400 "truncated JSON" "${h[@]}" "$c" -d '{"prompt": "x", "max_tokens": 4'
malformed 400 "empty body" "${h[@]}" "$c" -d ''
malformed 400 "not an object" "${h[@]}" "$c" -d '[1, 2, 3]'
malformed 400 "prompt missing" "${h[@]}" "$c" -d '{"max_tokens": 4}'
malformed 400 "max_tokens a string" "${h[@]}" "$c" -d '{"prompt": "x", "max_tokens": "4"}'
malformed 400 "temperature a list" "${h[@]}" "$c" -d '{"prompt": "x", "temperature": [1]}'
malformed 400 "stream a string" "${h[@]}" "$c" -d '{"prompt": "x", "stream": "yes"}'
malformed 400 "huge max_tokens" "${h[@]}" "$c" -d '{"prompt": "x", "max_tokens": 99999999999999999999999999}'
malformed 400 "huge seed" "${h[@]}" "$c" -d '{"prompt": "x", "seed": 1e400}'
malformed 400 "max_tokens beyond the context" "${h[@]}" "$c" -d '{"prompt": "x", "max_tokens": 100000}'
malformed 400 "negative temperature" "${h[@]}" "$c" -d '{"prompt": "x", "temperature": -1}'
malformed 400 "top_p 0" "${h[@]}" "$c" -d '{"prompt": "x", "top_p": 0}'
malformed 400 "top_k -5" "${h[@]}" "$c" -d '{"prompt": "x", "top_k": -5}'
malformed 400 "token id outside the vocabulary" "${h[@]}" "$c" -d '{"prompt": [1, 99999999]}'
malformed 400 "n = 2" "${h[@]}" "$c" -d '{"prompt": "x", "n": 2}'
malformed 400 "empty stop string" "${h[@]}" "$c" -d '{"prompt": "x", "stop": [""]}'
printf '{"prompt": "bad \xff\xfe bytes"}' >"$tmp/utf8.json"
malformed 400 "invalid UTF-8" "${h[@]}" "$c" --data-binary @"$tmp/utf8.json"
python3 -c 'print("{\"prompt\": \"" + "the " * 5000 + "\"}")' >"$tmp/long.json"
malformed 400 "prompt longer than the context" "${h[@]}" "$c" --data-binary @"$tmp/long.json"
head -c 10485760 /dev/zero | tr '\0' 'a' >"$tmp/10mb.txt"
malformed 413 "10 MB body" "${h[@]}" "$c" --data-binary @"$tmp/10mb.txt"
python3 -c 'print("{\"prompt\": \"x\", \"logit_bias\": " + "[" * 400000 + "]" * 400000 + "}")' >"$tmp/deep.json"
malformed 400 "arrays nested 400000 deep" "${h[@]}" "$c" --data-binary @"$tmp/deep.json"
malformed 413 "a long form-encoded body" "$c" --data-binary @"$tmp/long.json"
cc=$(url /v1/chat/completions)
malformed 400 "empty messages" "${h[@]}" "$cc" -d '{"messages": []}'
malformed 400 "unknown role" "${h[@]}" "$cc" -d '{"messages": [{"role": "wizard", "content": "x"}]}'
malformed 400 "content a number" "${h[@]}" "$cc" -d '{"messages": [{"role": "user", "content": 5}]}'
malformed 400 "image part" "${h[@]}" "$cc" -d '{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}'
malformed 404 "unknown route" "$(url /v1/nothing)"
kill -0 "$pid" 2>/dev/null && ok "alive after the malformed requests" || bad "the server died"
check_against_generate "d = 0 after the malformed requests"

# The official OpenAI client (Node), installed from the lock file outside the source tree.
if have_node; then
  if npm_install openai_client_test.mjs; then
    if node "$tmp/openai_client_test.mjs" "$(url /v1)"; then
      ok "openai Node client"
    else
      bad "openai Node client"
    fi
  else
    bad "npm ci failed (its log above)"
  fi
else
  echo "SKIP openai Node client: node or npm not installed"
fi
grep -q 'cmpl-.*prompt + .*completion tokens, ttft' "$tmp/plain.log" &&
  ok "one log line per request" || bad "no per-request log line in the server log"
stop_server plain

# --- d = 3 ---------------------------------------------------------------------------------------
start spec --speculative-algorithm NEXTN --speculative-num-steps 3 --max-running-requests 2
check_against_generate "d = 3" --speculative-algorithm NEXTN --speculative-num-steps 3
concurrent 6
check_sampled "d = 3" --speculative-algorithm NEXTN --speculative-num-steps 3
accept=$(metric dsa:spec_accept_length)
drafts=$(metric dsa:spec_decode_num_draft_tokens_total)
py 'import sys; assert float(sys.argv[1]) >= 1 and float(sys.argv[2]) > 0' "$accept" "$drafts" &&
  ok "d = 3 metrics: accept length $accept, $drafts draft tokens" ||
  bad "d = 3 metrics: accept length '$accept', draft tokens '$drafts'"
stop_server spec

# --- overload: 1 running + 2 queued, 12 at once; then SIGTERM under load ---------------------------
# (48 tokens each: long enough that the 12 overlap even on a busy CI machine)
start busy --max-running-requests 1 --max-queued-requests 2 --shutdown-grace-s 3
for i in $(seq 1 12); do
  curl -s --max-time 60 -D "$tmp/h$i" -o "$tmp/b$i" -w '%{http_code}' "$(url /v1/completions)" \
    -d '{"prompt": "And the king", "max_tokens": 48, "temperature": 0, "ignore_eos": true}' >"$tmp/c$i" &
done
wait_curls
n200=0 n429=0 other=0
for i in $(seq 1 12); do
  case $(cat "$tmp/c$i") in
    200)
      n200=$((n200 + 1))
      py 'import json, sys; r = json.load(open(sys.argv[1])); assert r["usage"]["completion_tokens"] == 48' "$tmp/b$i" ||
        bad "an admitted request did not complete: $(cat "$tmp/b$i")"
      ;;
    429)
      n429=$((n429 + 1))
      grep -qi '^retry-after: ' "$tmp/h$i" || bad "a 429 without Retry-After"
      grep -q '"rate_limit_error"' "$tmp/b$i" || bad "a 429 without an OpenAI error: $(cat "$tmp/b$i")"
      ;;
    *) other=$((other + 1)) ;;
  esac
done
if [ "$n200" -ge 3 ] && [ "$n429" -ge 1 ] && [ "$other" = 0 ]; then
  ok "overload: $n200 completed, $n429 refused with 429 + Retry-After"
else
  bad "overload: $n200 x 200, $n429 x 429, $other other"
fi
# A client that leaves while its request waits in the queue (behind a long one): the stream's
# keep-alive comment finds the socket closed, the request is aborted; the long one goes on.
aborts_before=$(metric 'dsa:num_requests_total{finish_reason="abort"}')
curl -sN --max-time 30 "$(url /v1/completions)" -d '{"prompt": "Once", "max_tokens": 200, "ignore_eos": true, "stream": true}' >"$tmp/long" 2>/dev/null &
sleep 0.3
curl -sN --max-time 1 "$(url /v1/completions)" -d '{"prompt": "Once", "max_tokens": 8, "stream": true}' >/dev/null 2>&1
aborts_after=$aborts_before
for _ in $(seq 1 150); do
  aborts_after=$(metric 'dsa:num_requests_total{finish_reason="abort"}')
  [ "$aborts_after" != "$aborts_before" ] && break
  sleep 0.1
done
[ "$aborts_after" != "$aborts_before" ] && ok "a client gone while queued: its request aborted" ||
  bad "a client gone while queued: no abort ($aborts_before -> $aborts_after)"
wait_curls
grep -q '"finish_reason":"length"' "$tmp/long" && ok "the long request behind it completed" ||
  bad "the long request: $(tail -c 200 "$tmp/long")"
for i in 1 2 3; do
  curl -sN --max-time 30 "$(url /v1/completions)" -d '{"prompt": "Once", "max_tokens": 300, "ignore_eos": true, "stream": true}' >"$tmp/s$i" 2>/dev/null &
done
sleep 0.5
stop_server busy
wait_curls
grep -q '^data: \[DONE\]' "$tmp/s1" && ok "the stream in flight at SIGTERM was ended with [DONE]" ||
  bad "the stream in flight at SIGTERM: $(tail -c 200 "$tmp/s1")"

# --- slow clients ---------------------------------------------------------------------------------
# Eight clients send half a request and stall: a whole request still completes meanwhile, and the
# server drops each stalled connection after its read timeout (2 s here) instead of holding a
# thread for it forever.
start slow --http-timeout-s 2 --max-running-requests 1
if py '
import socket, sys, time, urllib.request
port = int(sys.argv[1])
stalled = []
for _ in range(8):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100\r\n\r\n{\"prompt\": ")
    stalled.append(s)
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                             b"{\"prompt\": \"x\", \"max_tokens\": 2}",
                             {"Content-Type": "application/json"})
assert urllib.request.urlopen(req, timeout=20).status == 200
deadline = time.time() + 20
for s in stalled:
    s.settimeout(max(0.1, deadline - time.time()))
    while s.recv(4096):  # a response, if any, then the close
        pass
' "$port"; then
  ok "slow clients: a request completed beside 8 stalled ones, which the server dropped"
else
  bad "slow clients: a request blocked or a stalled connection was never dropped"
fi
stop_server slow

# --- bad flags -----------------------------------------------------------------------------------
out=$("$dsa" serve --model "$model" --port 70000 2>&1 >/dev/null)
[ $? -ne 0 ] && grep -q -- '--port = 70000' <<<"$out" && ok "bad --port: $out" || bad "bad --port: $out"
out=$("$dsa" serve --model "$model" --max-queued-requests -1 2>&1 >/dev/null)
[ $? -ne 0 ] && grep -q -- '--max-queued-requests = -1' <<<"$out" && ok "bad --max-queued-requests: $out" ||
  bad "bad --max-queued-requests: $out"

[ "$fail" = 0 ] && echo "server_test: all checks passed" || echo "server_test: FAILED"
exit "$fail"
