#!/usr/bin/env python3
"""Per-kernel difference between two target forwards, each from an Nsight Compute CSV of
`dsa generate` (made as ncu_forward_table.py says): where a TARGET_VERIFY's time goes beyond a
DECODE's at the same batch (issue 15: the verify's ~30 us over a decode on the tiny model).

A forward opens at a gathering rmsnorm (the target's first norm gathers the embedding rows; an
MTP forward opens with two, its enorm and hnorm). Target forwards are those with LAYERS sparse
MLA launches; the last one of each file is taken (at d = 0 a decode, at d >= 1 a verify; the
first forward, the prefill, is never the last of a run that decodes).

Usage: ncu_forward_diff.py CSV_A CSV_B [LAYERS]   (LAYERS: the target's layer count, default 4)
Prints, per kernel name, the launches and us in A and in B and B - A, largest |B - A| first.
"""

import sys

from ncu_forward_table import read_kernels, totals_by_name


def target_forwards(kernels, layers):
    # Opens: a gathering norm not right after another (an MTP forward's hnorm follows its enorm).
    opens = [i for i, k in enumerate(kernels)
             if k[0].startswith("rmsnorm_gather") and
             not (i > 0 and kernels[i - 1][0].startswith("rmsnorm_gather"))]
    bounds = opens + [len(kernels)]
    forwards = [kernels[a:b] for a, b in zip(bounds, bounds[1:])]
    return [f for f in forwards
            if sum(1 for k in f if k[0].startswith("sparse_mla") and "combine" not in k[0]) ==
            layers]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    picked = []
    for path in sys.argv[1:3]:
        found = target_forwards(read_kernels(path), layers)
        if not found:
            sys.exit(f"{path}: no forward with {layers} sparse MLA launches")
        picked.append(found[-1])
    a, b = (totals_by_name(f) for f in picked)
    for tag, f in zip("AB", picked):
        print(f"{tag}: {len(f)} kernels, {sum(k[1] for k in f):.1f} us")
    names = list(dict.fromkeys(list(a) + list(b)))
    rows = [(n, a.get(n, [0, 0.0]), b.get(n, [0, 0.0])) for n in names]
    rows.sort(key=lambda r: -abs(r[2][1] - r[1][1]))
    print("%-48s %4s %9s %4s %9s %9s" % ("kernel", "n A", "us A", "n B", "us B", "B - A"))
    for name, (na, ua), (nb, ub) in rows:
        print("%-48s %4d %9.1f %4d %9.1f %+9.1f" % (name, na, ua, nb, ub, ub - ua))


if __name__ == "__main__":
    main()
