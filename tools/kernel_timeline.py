#!/usr/bin/env python3
"""Where a decode step's device time goes, kernel by kernel, from tools/kernel_trace's CSV.

A step starts at each launch of the step graph (default: the graph with the most kernels per
launch, the target forward: a decode at d = 0, the verify at d > 0) and ends at the next one. Over
the steps whose sequence of records matches the most common one (the steady state), prints for
each position its mean start offset, duration and the idle gap before it (device time with no
kernel or copy running), the graph it belongs to ('-' = launched outside a graph) and the name;
then the totals: step time = busy + idle, and per graph the span, busy time and kernel count.

Usage: kernel_timeline.py TRACE.csv[.gz] [--step-graph ID] [--skip N] [--top N]
"""
import argparse
import collections
import csv
import gzip
import re
import statistics


def short(name):
    name = name.replace("(anonymous namespace)", "anon")
    name = re.sub(r"\(.*", "", name)
    name = re.sub(r"<.*", "", name)
    name = re.sub(r"^void ", "", name)
    return name.split("::")[-1][:44]


def load(path):
    rows = []
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        for r in csv.DictReader(f):
            rows.append(dict(kind=r["kind"], start=int(r["start_ns"]), end=int(r["end_ns"]),
                             graph=int(r["graph_id"]), corr=int(r["correlation"]), name=short(r["name"]) if r["kind"] == "kernel"
                             else f"{r['kind']} {r['bytes']}B"))
    rows.sort(key=lambda r: r["start"])
    return rows


def busy(records):
    """Time covered by at least one record (PDL lets neighbours overlap)."""
    total, cur_s, cur_e = 0, None, None
    for r in sorted(records, key=lambda r: r["start"]):
        if cur_e is None or r["start"] > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = r["start"], r["end"]
        else:
            cur_e = max(cur_e, r["end"])
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def launches(rows):
    """Graph launches: runs of consecutive records of one graph launch (its kernels share the
    launch call's correlation id); a record outside a graph (id 0) is a launch of its own."""
    runs = []
    for r in rows:
        if r["graph"] and runs and runs[-1][0] == r["graph"] and runs[-1][1][-1]["corr"] == r["corr"]:
            runs[-1][1].append(r)
        else:
            runs.append((r["graph"], [r]))
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--step-graph", type=int, default=0)
    ap.add_argument("--skip", type=int, default=3, help="steps skipped at the start (warm-up)")
    ap.add_argument("--top", type=int, default=400)
    a = ap.parse_args()
    rows = load(a.csv)
    runs = launches(rows)
    per_graph = collections.defaultdict(list)
    for g, recs in runs:
        if g:
            per_graph[g].append(recs)
    if not per_graph:
        print("no graph launches in the trace")
        return
    step_graph = a.step_graph or max(per_graph, key=lambda g: (
        statistics.median(len(x) for x in per_graph[g]), len(per_graph[g])))
    starts = [i for i, (g, _) in enumerate(runs) if g == step_graph]
    steps = [runs[i:j] for i, j in zip(starts, starts[1:])]
    steps = steps[a.skip:]
    # The step ends where the next step graph starts: drop long host pauses (prefills, sampling
    # on the host, the end of a request) by keeping the most common sequence of names.
    sig = lambda st: tuple((g, r["name"]) for g, recs in st for r in recs)
    common = collections.Counter(sig(st) for st in steps).most_common(1)
    if not common:
        print("fewer than two launches of the step graph")
        return
    keep = [st for st in steps if sig(st) == common[0][0]]
    print(f"step graph {step_graph}: {len(steps)} steps after {a.skip} skipped; {len(keep)} share the "
          f"most common sequence ({len(common[0][0])} records)")
    nxt = {id(st): runs[starts[a.skip + k + 1]][1][0]["start"] for k, st in enumerate(steps)
           if a.skip + k + 1 < len(starts)}
    period, idle_sum, busy_sum = [], [], []
    pos = collections.defaultdict(lambda: {"off": [], "dur": [], "gap": []})
    graph_span = collections.defaultdict(list)
    graph_busy = collections.defaultdict(list)
    for st in keep:
        if id(st) not in nxt:
            continue
        t0 = st[0][1][0]["start"]
        flat = [(g, r) for g, recs in st for r in recs]
        period.append(nxt[id(st)] - t0)
        b = busy([r for _, r in flat])
        busy_sum.append(b)
        idle_sum.append(period[-1] - b)
        reach = t0
        for k, (g, r) in enumerate(flat):
            pos[k]["off"].append(r["start"] - t0)
            pos[k]["dur"].append(r["end"] - r["start"])
            pos[k]["gap"].append(max(0, r["start"] - reach))
            reach = max(reach, r["end"])
        for n, (g, recs) in enumerate(st):
            graph_span[(n, g)].append(recs[-1]["end"] - recs[0]["start"])
            graph_busy[(n, g)].append(busy(recs))
    if not period:
        print("no complete steady step")
        return
    us = lambda v: statistics.mean(v) / 1e3
    print(f"step {us(period):.2f} us = busy {us(busy_sum):.2f} + idle {us(idle_sum):.2f} "
          f"(over {len(period)} steps; kernels/copies per step {len(common[0][0])})")
    print(f"{'#':>4} {'offset':>8} {'dur us':>7} {'gap us':>7} {'graph':>6}  name")
    flat0 = [(g, r) for g, recs in keep[0] for r in recs]
    for k, (g, r) in enumerate(flat0[: a.top]):
        p = pos[k]
        print(f"{k:>4} {us(p['off']):8.2f} {us(p['dur']):7.2f} {us(p['gap']):7.2f} "
              f"{(str(g) if g else '-'):>6}  {r['name']}")
    print("\nper launch in the step (n: its order): span = first start to last end, busy, records")
    for (n, g), spans in sorted(graph_span.items()):
        print(f"  {n:>2} graph {g if g else '-':>6}: span {us(spans):8.2f} us, busy "
              f"{us(graph_busy[(n, g)]):8.2f} us, {len(keep[0][n][1])} records")
    by_name = collections.defaultdict(float)
    for k, (g, r) in enumerate(flat0):
        by_name[r["name"]] += us(pos[k]["dur"])
    print("\nsummed duration per kernel name in a step (overlaps counted twice):")
    for name, t in sorted(by_name.items(), key=lambda x: -x[1])[:25]:
        print(f"  {t:8.2f} us  {name}")


if __name__ == "__main__":
    main()
