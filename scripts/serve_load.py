#!/usr/bin/env python3
"""Load test of a running `dsa serve` from Python's standard library alone, for machines without
Node.js (the lent GPU machine): N concurrent streaming clients of mixed lengths against
/v1/completions and /v1/chat/completions, each checked (one final chunk, `data: [DONE]`, usage =
tokens streamed), then one JSON summary line: throughput, TTFT and end-to-end p50/p99.

  scripts/serve_load.py --url http://127.0.0.1:31555 [--clients 64] [--per-client 2]

Exit code 1 if any request failed or a stream was malformed. tests/server/ holds the CI load test
(the official OpenAI Node client); this one measures.
"""
import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse

PROMPTS = [
    "And the king said unto",
    "In the beginning",
    "Blessed are they",
    "And it came to pass, when",
    "The LORD is my shepherd",
    "Now these are the generations of",
]
MAX_TOKENS = [4, 8, 16, 32, 48]


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def one_request(url, index, results, errors):
    chat = index % 2 == 1
    body = {
        "max_tokens": MAX_TOKENS[index % len(MAX_TOKENS)],
        "temperature": 0 if index % 4 else 0.8,
        "seed": index,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    prompt = PROMPTS[index % len(PROMPTS)]
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = prompt
        path = "/v1/completions"
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    start = time.monotonic()
    first = None
    text, finals, usage, done = [], 0, None, False
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            errors.append(f"request {index}: HTTP {resp.status}: {resp.read()[:200]!r}")
            return
        for raw in resp:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            payload = line[len("data: "):]
            if payload == "[DONE]":
                done = True
                break
            chunk = json.loads(payload)
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                piece = choice["delta"].get("content", "") if chat else choice.get("text", "")
                if piece and first is None:
                    first = time.monotonic()
                text.append(piece or "")
                if choice.get("finish_reason"):
                    finals += 1
    except Exception as e:  # a broken stream is a failed request, reported below
        errors.append(f"request {index}: {type(e).__name__}: {e}")
        return
    finally:
        conn.close()
    end = time.monotonic()
    if not done or finals != 1 or usage is None:
        errors.append(f"request {index}: done={done} final chunks={finals} usage={usage}")
        return
    results.append({
        "ttft": (first or end) - start,
        "e2e": end - start,
        "tokens": usage["completion_tokens"],
    })


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--per-client", type=int, default=2, help="requests each client sends in turn")
    args = ap.parse_args()
    if not 1 <= args.clients <= 4096 or not 1 <= args.per_client <= 1000:
        sys.exit("serve_load: --clients must be in [1, 4096] and --per-client in [1, 1000]")
    results, errors = [], []

    def client(c):
        for r in range(args.per_client):
            one_request(args.url, c * args.per_client + r, results, errors)

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    tokens = sum(r["tokens"] for r in results)
    ttft = [r["ttft"] for r in results]
    e2e = [r["e2e"] for r in results]
    summary = {
        "clients": args.clients,
        "requests": args.clients * args.per_client,
        "completed": len(results),
        "failed": len(errors),
        "completion_tokens": tokens,
        "wall_s": round(wall, 3),
        "tokens_per_s": round(tokens / wall, 1),
        "requests_per_s": round(len(results) / wall, 2),
        "ttft_p50_s": round(percentile(ttft, 0.5), 4) if ttft else None,
        "ttft_p99_s": round(percentile(ttft, 0.99), 4) if ttft else None,
        "e2e_p50_s": round(percentile(e2e, 0.5), 4) if e2e else None,
        "e2e_p99_s": round(percentile(e2e, 0.99), 4) if e2e else None,
        "ttft_mean_s": round(statistics.mean(ttft), 4) if ttft else None,
    }
    print(json.dumps(summary))
    for e in errors[:10]:
        print("serve_load:", e, file=sys.stderr)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
