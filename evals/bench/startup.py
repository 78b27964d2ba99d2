#!/usr/bin/env python3
"""Start-up time of two probing-mcp binaries, interleaved so that load
drifts hit both: `version` (spawn to exit) and `serve` (spawn to the answer
to an `initialize` sent over stdio).

    evals/bench/startup.py BEFORE AFTER [RUNS]

docs/BENCHMARKS.md (issue 26) gives what it printed.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    bins = {"before": sys.argv[1], "after": sys.argv[2]}
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    data = tempfile.mkdtemp(prefix="probing-startup-")
    env = dict(os.environ, PROBING_DATA_DIR=data, PROBING_ALLOWED_FILE_DIRS=data, PROBING_MCP_HISTORY="off")
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}) + "\n"

    def version(b):
        t = time.perf_counter()
        subprocess.run([b, "version"], stdout=subprocess.DEVNULL, env=env, check=True)
        return time.perf_counter() - t

    def serve(b):
        t = time.perf_counter()
        p = subprocess.Popen([b, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, env=env)
        p.stdin.write(init.encode())
        p.stdin.flush()
        line = p.stdout.readline()
        d = time.perf_counter() - t
        p.stdin.close()
        p.wait()
        if b'"result"' not in line:
            sys.exit(f"{b} serve answered {line!r}")
        return d

    res = {f"{k}/{w}": [] for w in ("version", "serve") for k in bins}
    for _ in range(runs):
        for k, b in bins.items():
            res[f"{k}/version"].append(version(b))
            res[f"{k}/serve"].append(serve(b))
    for k, v in res.items():
        v.sort()
        print(f"{k}: median {statistics.median(v)*1000:.1f} ms, p10 {v[len(v)//10]*1000:.1f}, "
              f"p90 {v[len(v)*9//10]*1000:.1f} (n={len(v)})")


if __name__ == "__main__":
    main()
