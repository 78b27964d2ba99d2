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
    """The job's step intervals (ms) recorded between two times."""
    for table, col in (("python.torch_step_timing", "timestamp"), ("python.comm_collective", "timestamp")):
        q = ("SELECT _rank, %s FROM %s WHERE %s >= %d AND %s < %d ORDER BY _rank, %s" % (col, table, col, t0_us, col, t1_us, col))
        res = subprocess.run([binary, "query", q, "--json", "--limit", "100000"], env=env, capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            continue
        rows = json.loads(res.stdout).get("rows") or []
        by = {}
        for r in rows:
            vals = r if isinstance(r, list) else list(r.values())
            by.setdefault(vals[0], []).append(vals[1])
        gaps = []
        for ts in by.values():
            gaps += [(b - a) / 1000.0 for a, b in zip(ts, ts[1:]) if b > a]
        if gaps:
            return gaps, table
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
                gaps, table = steps_between(opt.bin, env, t0, t1)
                out[mode].append(statistics.median(gaps) if gaps else None)
                print("%-8s window: %d steps, median step %.2f ms (%s)" % (mode, len(gaps), out[mode][-1] or 0, table), flush=True)
        wo = [x for x in out["without"] if x]
        wi = [x for x in out["with"] if x]
        if wo and wi:
            a, b = statistics.median(wo), statistics.median(wi)
            print("median step without the watcher %.2f ms, with it %.2f ms: %+.2f%%" % (a, b, 100 * (b - a) / a))
        return 0
    finally:
        corpus.stop_launcher(launcher, pids)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
