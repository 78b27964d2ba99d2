#!/usr/bin/env python3
"""What `probing-mcp watch` costs a running job: its step time with and
without the watcher, in one run, alternating.

A healthy corpus job (the socket job, or with --python-torch the DDP job)
runs throughout; the script alternates windows without and with a watcher
(`probing-mcp watch --interval 1s`) and reads each window's steps from the
job's own rings (python.torch_step_timing, else the collectives), through
`probing-mcp query`.

  python3 evals/watch_cost.py --window 60 --rounds 3
  python3 evals/watch_cost.py --python-torch /venv/bin/python
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import corpus
from corpus import JOBS, REPO


def steps_between(binary, env, t0_us, t1_us):
    """The job's mean step (ms) per rank between two times, from its rings:
    (last - first) / (steps - 1) per rank; returns (per-rank means, table)."""
    for table in ("python.torch_step_timing", "python.comm_collective"):
        q = ("SELECT _rank, count(*) AS n, min(timestamp) AS t0, max(timestamp) AS t1 FROM %s "
             "WHERE timestamp >= %d AND timestamp < %d GROUP BY _rank" % (table, t0_us, t1_us))
        res = subprocess.run([binary, "query", "--json", "--limit", "1000", q], env=env, capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            if os.environ.get("WATCH_COST_DEBUG"):
                print(res.stderr[-500:], file=sys.stderr)
            continue
        out = json.loads(res.stdout)
        if os.environ.get("WATCH_COST_DEBUG"):
            print(json.dumps(out)[:600], file=sys.stderr)
        means = []
        for r in out.get("rows") or []:
            v = r if isinstance(r, dict) else dict(zip(("_rank", "n", "t0", "t1"), r))
            n, a, b = int(v["n"]), int(v["t0"]), int(v["t1"])
            if n > 1 and b > a:
                means.append((b - a) / 1000.0 / (n - 1))
        if means:
            return means, table
    return [], ""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python-torch", metavar="PATH", help="watch the DDP job (torch) instead of the socket job")
    ap.add_argument("--window", type=int, default=60, help="seconds per window (default 60)")
    ap.add_argument("--rounds", type=int, default=3, help="pairs of windows, without then with (default 3)")
    ap.add_argument("--bin", default=os.path.join(REPO, "bin", "probing-mcp"))
    opt = ap.parse_args(argv)
    job, py = ("ddp_job.py", opt.python_torch) if opt.python_torch else ("socket_job.py", sys.executable)
    tmp = tempfile.mkdtemp(prefix="probing-watchcost-")
    data, ctrl, ready = os.path.join(tmp, "data"), os.path.join(tmp, "ctrl"), os.path.join(tmp, "ready.json")
    launcher = subprocess.Popen([py, os.path.join(JOBS, job), "--scenario", "healthy", "--world", "4",
                                 "--data-dir", data, "--ctrl-root", ctrl, "--ready-file", ready],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    env = corpus.server_env(data, ctrl)
    env["PROBING_MCP_HISTORY"] = os.path.join(tmp, "history.db")
    corpus.install_signals()
    pids = []
    try:
        deadline = time.monotonic() + 240
        while not os.path.exists(ready):
            if launcher.poll() is not None or time.monotonic() > deadline:
                print("the job did not start", file=sys.stderr)
                return 1
            time.sleep(0.2)
        with open(ready) as f:
            pids = [int(x) for x in json.load(f).get("pids", [])]
        out = {"without": [], "with": []}
        for _ in range(opt.rounds):
            for mode in ("without", "with"):
                w = None
                if mode == "with":
                    w = subprocess.Popen([opt.bin, "watch", "--interval", "1s"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1)
                t0 = int(time.time() * 1e6)
                time.sleep(opt.window)
                t1 = int(time.time() * 1e6)
                if w:
                    w.terminate()
                    w.wait(30)
                means, table = steps_between(opt.bin, env, t0, t1)
                out[mode].append(statistics.median(means) if means else None)
                print("%-8s window: %d rank(s), median of their mean intervals %.2f ms (%s)" % (mode, len(means), out[mode][-1] or 0, table), flush=True)
        wo = [x for x in out["without"] if x]
        wi = [x for x in out["with"] if x]
        if wo and wi:
            a, b = statistics.median(wo), statistics.median(wi)
            print("median interval without the watcher %.2f ms, with it %.2f ms: %+.2f%%" % (a, b, 100 * (b - a) / a))
        return 0
    finally:
        corpus.stop_launcher(launcher, pids)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
