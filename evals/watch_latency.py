#!/usr/bin/env python3
"""How fast `probing-mcp watch` notices a hang, per fault family.

Each case launches a corpus job (evals/jobs, the launcher protocol) and,
at the same moment, `probing-mcp watch --json --until stalled,dead`
on its dirs, with the default thresholds. The watcher's own events say how
long the job had made no progress when it noticed (the capture's
stalled_for) and when it alerted (the confirmed event's); the ready file's
truth says whether the culprit was right.

  python3 evals/watch_latency.py --python-torch /venv/bin/python
  python3 evals/watch_latency.py --torch-free
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import corpus
from corpus import JOBS, REPO

TORCH_FREE = [("socket_job.py", "cpu_stall", 4), ("socket_job.py", "missing_from_collective", 4), ("socket_job.py", "dead_rank", 4),
              ("socket_job.py", "deadlock", 4)]
TORCH = [("ddp_job.py", "loader_stuck", 4), ("tp_gloo_job.py", "missing_from_collective_tp", 4), ("tp_gloo_job.py", "dead_rank", 4)]


def secs(d):
    """Go's duration text (1m2s, 5.2s, 800ms) in seconds."""
    if not d:
        return None
    total, num = 0.0, ""
    i = 0
    while i < len(d):
        c = d[i]
        if c.isdigit() or c == ".":
            num += c
            i += 1
            continue
        unit = c
        if d[i:i + 2] in ("ms", "us", "µs", "ns"):
            unit = d[i:i + 2]
            i += 2
        else:
            i += 1
        total += float(num) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}[unit]
        num = ""
    return total


def run(job, scenario, world, python, binary):
    tmp = tempfile.mkdtemp(prefix="probing-watch-")
    data, ctrl, ready = os.path.join(tmp, "data"), os.path.join(tmp, "ctrl"), os.path.join(tmp, "ready.json")
    launcher = subprocess.Popen([python, os.path.join(JOBS, job), "--scenario", scenario, "--world", str(world),
                                 "--data-dir", data, "--ctrl-root", ctrl, "--ready-file", ready],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "launcher.err"), "wb"), cwd=REPO)
    env = corpus.server_env(data, ctrl)
    env["PROBING_MCP_HISTORY"] = os.path.join(tmp, "history.db")
    out = {"case": "%s:%s/%d" % (job.replace("_job.py", ""), scenario, world)}
    try:
        w = subprocess.run([binary, "watch", "--json", "--until", "stalled,dead", "--for", "240s"], env=env,
                           capture_output=True, text=True, timeout=360)
        events = [json.loads(l) for l in w.stdout.splitlines() if l.strip()]
        deadline = time.monotonic() + 240
        while not os.path.exists(ready) and time.monotonic() < deadline and launcher.poll() is None:
            time.sleep(0.2)
        truth = {}
        if os.path.exists(ready):
            with open(ready) as f:
                truth = json.load(f).get("truth") or {}
        cap = next((e for e in events if e["kind"] == "captured"), None)
        conf = next((e for e in events if e["kind"] in ("stalled", "dead")), None)
        out.update({
            "step": (cap or conf or {}).get("headline", {}).get("step"),
            "threshold": (cap or conf or {}).get("headline", {}).get("threshold"),
            "noticed_s": secs((cap or {}).get("headline", {}).get("stalled_for")),
            "alerted_s": secs((conf or {}).get("headline", {}).get("stalled_for")),
            "culprits": (conf or {}).get("headline", {}).get("culprits"),
            "category": (conf or {}).get("headline", {}).get("category"),
            "truth": "%s %s" % (truth.get("culprits"), truth.get("category")),
            "events": [e["kind"] for e in events]})
        out["right"] = bool(conf) and out["culprits"] == truth.get("culprits") and out["category"] == truth.get("category")
    finally:
        pids = []
        if os.path.exists(ready):
            with open(ready) as f:
                pids = [int(x) for x in json.load(f).get("pids", [])]
        corpus.stop_launcher(launcher, pids)
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--torch-free", action="store_true")
    ap.add_argument("--python-torch", metavar="PATH")
    ap.add_argument("--torch-only", action="store_true", help="only the torch jobs' cases")
    ap.add_argument("--bin", default=os.path.join(REPO, "bin", "probing-mcp"))
    ap.add_argument("--json", metavar="OUT")
    opt = ap.parse_args(argv)
    cases = [(c, sys.executable) for c in TORCH_FREE] if not opt.torch_only else []
    if not opt.torch_free:
        if not opt.python_torch:
            ap.error("--python-torch PATH, or --torch-free")
        cases += [(c, opt.python_torch) for c in TORCH]
    corpus.install_signals()
    rows = []
    for (job, scenario, world), py in cases:
        r = run(job, scenario, world, py, opt.bin)
        rows.append(r)
        print("%-40s step %-6s threshold %-5s noticed after %-6s alerted after %-6s %s %s (truth %s) %s" % (
            r["case"], r.get("step"), r.get("threshold"), r.get("noticed_s"), r.get("alerted_s"),
            r.get("culprits"), r.get("category"), r.get("truth"), "ok" if r.get("right") else "WRONG"), flush=True)
    if opt.json:
        with open(opt.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r.get("right") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
