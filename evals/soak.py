#!/usr/bin/env python3
"""Soaks `probing-mcp watch` on jobs that must never page anyone.

Each case is a real job of the corpus that keeps running as training jobs
do (evals/jobs: DDP with a DataLoader, AdamW and a checkpoint saved and
uploaded by rank 0 every 10 steps; DDP with a long validation pass; the
torch-free socket job, at its pace and slowed to 1.5-s steps; the
tensor/data-parallel gloo job), launched by the
corpus' launcher protocol and watched for --minutes by `probing-mcp watch
--json`. A case fails when the watcher raised an alert (level warn or
error: a stall or death confirmed, a straggler, a blind watcher); info
events (a capture, a pause said as a pause) are counted and shown.

  python3 evals/soak.py --python-torch /venv/bin/python              20 minutes in all
  python3 evals/soak.py --torch-free --minutes 2                      the socket job only
  make soak TORCH_PYTHON=/venv/bin/python
"""
import argparse
import json
import os
import subprocess
import sys
import time

import corpus
from corpus import REPO

# (job, scenario, world, environment): healthy, slow, checkpointing and
# evaluating jobs.
TORCH_FREE = [("socket_job.py", "healthy", 4, {}), ("socket_job.py", "healthy", 4, {"SOCKET_JOB_COMPUTE_S": "1.5"})]
TORCH = [("ddp_job.py", "healthy", 4, {}), ("ddp_job.py", "validation_pause", 4, {}), ("tp_gloo_job.py", "healthy", 4, {})]


def watch_case(case, opt):
    def body(r, job):
        env = corpus.server_env(job.data, job.ctrl)
        env.pop("PROBING_WEBHOOK_URL", None)
        env["PROBING_MCP_HISTORY"] = os.path.join(job.tmp, "history.db")
        t0 = time.monotonic()
        res = subprocess.run([opt.bin, "watch", "--json", "--for", "%ds" % int(opt.minutes * 60)], env=env,
                             capture_output=True, text=True, timeout=opt.minutes * 60 + 120)
        r["watched_s"] = round(time.monotonic() - t0, 1)
        if res.returncode != 0:
            r["error"] = "probing-mcp watch exited %d: %s" % (res.returncode, res.stderr[-1000:])
            return
        events = [json.loads(l) for l in res.stdout.splitlines() if l.strip()]
        r["events"] = [{"kind": e["kind"], "level": e["level"], "title": e["title"], "at": e["at"]} for e in events]
        r["alerts"] = [e for e in r["events"] if e["level"] in ("warn", "error")]
        r["info"] = [e for e in r["events"] if e["level"] == "info"]

    return corpus.run_case(case, opt, body)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--torch-free", action="store_true", help="only the torch-free job")
    ap.add_argument("--python-torch", metavar="PATH", help="interpreter with torch for the torch jobs")
    ap.add_argument("--minutes", type=float, default=4.0, help="how long each job is watched (default 4; 5 cases make 20 min)")
    ap.add_argument("--bin", default=os.path.join(REPO, "bin", "probing-mcp"))
    ap.add_argument("--json", metavar="OUT", help="write every case's events as JSON")
    ap.add_argument("--keep", action="store_true", help="keep each case's temp dir")
    opt = ap.parse_args(argv)
    opt.stall_seconds = corpus.DEFAULT_STALL_S
    if not os.access(opt.bin, os.X_OK):
        ap.error("%s is not built: make build" % opt.bin)
    specs = [(c, sys.executable) for c in TORCH_FREE]
    if not opt.torch_free:
        if not opt.python_torch:
            ap.error("--python-torch PATH (an interpreter with torch), or --torch-free")
        specs += [(c, opt.python_torch) for c in TORCH]
    corpus.install_signals()
    results, failed = [], 0
    for (job, scenario, world, extra), py in specs:
        case = corpus.Case(job, scenario, world, False, py)
        if extra:
            case.name += " (%s)" % ", ".join("%s=%s" % kv for kv in sorted(extra.items()))
            case.result["case"] = case.name
        saved = {k: os.environ.get(k) for k in extra}
        os.environ.update(extra)  # the launcher inherits it
        try:
            r = watch_case(case, opt)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        results.append(r)
        bad = r.get("error") or r.get("alerts")
        failed += bool(bad)
        what = "ERROR: " + r["error"].splitlines()[0] if r.get("error") else (
            "ALERTED: %s" % "; ".join("%s %s" % (a["level"], a["title"]) for a in r["alerts"]) if r.get("alerts") else "no alert")
        print("%-32s %s (%s s watched, %d info event(s): %s)" % (
            case.name, what, r.get("watched_s", "-"), len(r.get("info") or []),
            ", ".join(sorted(set(e["kind"] for e in r.get("info") or []))) or "none"), flush=True)
    total = sum(r.get("watched_s") or 0 for r in results)
    print("soak: %d case(s), %.1f min watched, %d with an alert or an error" % (len(results), total / 60, failed))
    if opt.json:
        with open(opt.json, "w") as f:
            json.dump({"minutes_each": opt.minutes, "results": results}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
