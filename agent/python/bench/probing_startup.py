#!/usr/bin/env python3
"""The original Probing agent's start-up cost, for comparison with ours.

    python3 agent/python/bench/probing_startup.py PYTHON [N]

PYTHON is an interpreter with `probing` (pip install probing==0.2.4). It
runs `python -c pass` N times (default 40) with PROBING unset and with
PROBING=1, interleaved in a shuffled order each round, and prints both
medians and the difference. startup.py measures ours the same way.
"""
import os
import random
import statistics
import subprocess
import sys
import time


def main():
    py = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    modes = {"unset": {}, "PROBING=1": {"PROBING": "1"}}
    res = {m: [] for m in modes}
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROBING")}
    for _ in range(3):  # warm the page cache and any .pyc files
        for e in modes.values():
            subprocess.run([py, "-c", "pass"], env={**base, **e}, check=True)
    for _ in range(n):
        order = list(modes)
        random.shuffle(order)
        for m in order:
            t = time.perf_counter()
            subprocess.run([py, "-c", "pass"], env={**base, **modes[m]}, check=True)
            res[m].append((time.perf_counter() - t) * 1000)
    for m, v in res.items():
        print("%-10s median %.1f ms" % (m, statistics.median(v)))
    print("added %.1f ms" % (statistics.median(res["PROBING=1"]) - statistics.median(res["unset"])))


if __name__ == "__main__":
    main()
