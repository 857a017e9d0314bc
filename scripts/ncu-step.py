#!/usr/bin/env python3
"""Per-kernel time of one decode step from ncu's CSV.

  ncu --clock-control none --metrics gpu__time_duration.sum --csv \\
      out/gosling bench one-batch ... --disable-cuda-graph --output-len 6 > step.csv
  python3 scripts/ncu-step.py step.csv

ncu profiles each kernel alone (serialised, caches flushed), so the
durations are the kernels' own, without the host's launches between
them. A step is taken as the kernels from one embedding launch to the
one two embeddings later (the step's token embedding and the sampler's),
and the last two whole steps are printed, kernels summed by name.
"""
import collections
import csv
import sys


def main(path):
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    rows = csv.reader(lines)
    hdr = next(rows)
    ki, vi, ui = hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Metric Unit")
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    ks = [(r[ki], float(r[vi].replace(",", "")) * scale[r[ui]]) for r in rows]
    starts = [i for i, (n, _) in enumerate(ks) if n.startswith("embedding")]
    if len(starts) < 5:
        sys.exit("%s: fewer than two whole steps of kernels" % path)
    for a, b in ((starts[-5], starts[-3]), (starts[-3], starts[-1])):
        step = ks[a:b]
        agg = collections.defaultdict(lambda: [0, 0.0])
        for n, v in step:
            agg[n][0] += 1
            agg[n][1] += v
        print("step: %d kernels, %.1f us" % (len(step), sum(v for _, v in step)))
        print("%10s %6s %9s  kernel" % ("us", "calls", "us/call"))
        for n, (c, v) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
            print("%10.1f %6d %9.2f  %s" % (v, c, v / c, n))


if __name__ == "__main__":
    main(sys.argv[1])
