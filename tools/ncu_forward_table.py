#!/usr/bin/env python3
"""Per-kernel table of one forward from an Nsight Compute CSV of `dsa generate`.

Made by
  ncu --csv --log-file CSV --clock-control none --metrics gpu__time_duration.sum \
      dsa generate ... --disable-cuda-graph
(--log-file keeps ncu's rows apart from generate's output; the table starts at ncu's "ID" header)
(each kernel timed alone, caches flushed before it: small kernels read cold what a graph finds in
L2, so their times here are upper bounds). A forward starts at its embedding lookup; the table is
forward FORWARD (default -1: the last one, a decode), summed by kernel name, largest first.

Usage: ncu_forward_table.py CSV [FORWARD] [-v]   (-v: also every kernel in launch order)
"""
import collections
import csv
import re
import sys


def short(name):
    name = re.sub(r"\(.*", "", name)
    name = re.sub(r"^void ", "", name).replace("<unnamed>", "anon")
    return name.split("::")[-1][:48]


def microseconds(row):
    value = float(row["Metric Value"].replace(",", ""))
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
    return value * scale[row["Metric Unit"]]


def read_kernels(path):
    """The launches of an ncu --csv log in order: (short name, us, grid, block)."""
    with open(path) as f:
        lines = f.readlines()
    # The table starts at ncu's header row: a program line that starts with a quote is not it.
    header = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if header is None:
        sys.exit(f"{path}: no ncu CSV header (\"ID\",...): not an ncu --csv file")
    rows = list(csv.DictReader(line for line in lines[header:] if line.startswith('"')))
    return [(short(r["Kernel Name"]), microseconds(r), r["Grid Size"], r["Block Size"])
            for r in rows]


def totals_by_name(forward):
    """name -> [launches, us] over a forward's kernels, in first-launch order."""
    totals = collections.OrderedDict()
    for name, us, _, _ in forward:
        entry = totals.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += us
    return totals


def main():
    args = [a for a in sys.argv[1:] if a != "-v"]
    if not args:
        sys.exit(__doc__)
    kernels = read_kernels(args[0])
    # A target forward starts at its embedding lookup: the embedding kernel, or (since the first
    # norm gathers the embedding rows itself) the gathering rmsnorm. At d = 0 no MTP forward runs,
    # whose norms also gather.
    starts = [i for i, k in enumerate(kernels) if re.match(r"embedding_kernel|rmsnorm_gather", k[0])]
    if not starts:
        sys.exit("no embedding_kernel or rmsnorm_gather kernel: not a dsa forward")
    first = starts[int(args[1]) if len(args) > 1 else -1]
    later = [s for s in starts if s > first]
    forward = kernels[first:later[0] if later else len(kernels)]
    print(f"forwards start at kernels {starts} of {len(kernels)}")
    print(f"this forward: {len(forward)} kernels, {sum(k[1] for k in forward):.1f} us")
    if "-v" in sys.argv:
        for k in forward:
            print("%-48s %8.2f %s %s" % k)
    totals = totals_by_name(forward)
    for name, (count, us) in sorted(totals.items(), key=lambda item: -item[1][1]):
        print("%-48s %4d %9.1f" % (name, count, us))


if __name__ == "__main__":
    main()
