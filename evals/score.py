#!/usr/bin/env python3
"""Scores probing-mcp's diagnose_hang against jobs that hang with known answers.

For each case (a job program in evals/jobs/, a scenario, a world size,
live or post-mortem) it makes fresh data and control dirs, starts the
job's launcher (the protocol: evals/jobs/socket_job.py's docstring), waits
for its ready file, which holds the truth, starts `probing-mcp serve`
(stdio) on those dirs and calls diagnose_hang through the official MCP
Python SDK, then stops the launcher and checks that no rank is left.

Scores per case, against the top hypothesis:
  culprit   its culprit_ranks, as a set, equal the truth's
  category  its category is the truth's
  state     the report's state is the truth's
  frame     its where.file basename and where.function are the truth's
            (only where the truth names a frame)
and what the call cost: the bytes of its text content and of its
structured JSON, and its latency (ms, the call alone).

  python3 evals/score.py --torch-free                 the socket job's cases
  python3 evals/score.py --python-torch /venv/bin/python --json out.json
  python3 evals/score.py --only cpu_stall --check
  python3 evals/score.py --agent --torch-free          the scripted agent harness (agent.py)

The cases and how one is launched are corpus.py's; --agent runs agent.py's
harness on the same cases instead of the one scored call.

Needs the `mcp` package (mcp/testdata/e2e/requirements.txt) in the
interpreter running it, and the built binary (make build, or --bin).
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

import corpus
from corpus import CALL_TIMEOUT_S, DEFAULT_STALL_S, REPO, parse_rankset


# ------------------------------------------------------------ the MCP call

def call_diagnose(binary, data_dir, ctrl_root, args, errlog_path):
    """Starts `binary serve` (stdio) and calls diagnose_hang once. Returns
    (result dict, latency ms)."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = corpus.server_env(data_dir, ctrl_root)
    out = {}

    async def run():
        params = StdioServerParameters(command=binary, args=["serve"], env=env)
        with open(errlog_path, "w") as errlog:
            with anyio.fail_after(CALL_TIMEOUT_S):
                async with stdio_client(params, errlog=errlog) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        t0 = time.perf_counter()
                        res = await session.call_tool("diagnose_hang", args)
                        out["ms"] = (time.perf_counter() - t0) * 1000.0
                        out["is_error"] = bool(res.is_error)
                        out["text"] = "\n".join(b.text for b in res.content if getattr(b, "type", None) == "text")
                        out["structured"] = res.structured_content

    anyio.run(run)
    return out


# ---------------------------------------------------------------- one case

def score(report, truth):
    """The per-item verdicts of one report against its truth."""
    hyps = (report or {}).get("hypotheses") or []
    top = hyps[0] if hyps else {}
    s = {}
    try:
        s["culprit"] = parse_rankset(top.get("culprit_ranks", "")) == parse_rankset(truth.get("culprits", ""))
    except ValueError:
        s["culprit"] = False
    s["category"] = top.get("category") == truth.get("category")
    s["state"] = (report or {}).get("state") == truth.get("state")
    if truth.get("function"):
        w = top.get("where") or {}
        s["frame"] = (os.path.basename(w.get("file") or "") == truth.get("file")
                      and w.get("function") == truth.get("function"))
    else:
        s["frame"] = None  # nothing to cite
    return s


def run_case(case, opt):
    """Launches the case, calls diagnose_hang once and scores its answer."""
    def body(r, job):
        try:
            out = call_diagnose(opt.bin, job.data, job.ctrl, {"stall_seconds": opt.stall_seconds}, job.server_err)
        except Exception as e:  # an exception group from anyio, a timeout: the case's failure
            e = corpus.first_exception(e)
            r["error"] = "diagnose_hang call failed: %s: %s\n%s" % (type(e).__name__, e, job.tail_server_err())
            return
        rep = out.get("structured")
        r["ms"] = round(out["ms"], 1)
        r["text_bytes"] = len(out["text"].encode())
        r["json_bytes"] = len(json.dumps(rep, separators=(",", ":")).encode()) if rep is not None else 0
        r["text"] = out["text"]
        r["report"] = rep
        if out["is_error"] or rep is None:
            r["error"] = "diagnose_hang returned %s: %s" % ("an error" if out["is_error"] else "no structured content", out["text"][:2000])
            return
        r["score"] = score(rep, job.truth)
        hyps = rep.get("hypotheses") or []
        top = hyps[0] if hyps else {}
        r["got"] = {"state": rep.get("state"), "category": top.get("category", ""),
                    "culprits": top.get("culprit_ranks", ""), "where": top.get("where")}

    return corpus.run_case(case, opt, body)


def wrong(r):
    """Why a case is wrong ([] when right)."""
    if r.get("skipped"):
        return []
    if r.get("error"):
        return ["error"]
    return [k for k, v in r["score"].items() if v is False]


# ------------------------------------------------------------------ output

def table_rows(results):
    rows = [("case", "state (truth)", "category (truth)", "culprits (truth)", "frame", "text B", "json B", "ms", "verdict")]
    for r in results:
        if r.get("skipped"):
            rows.append((r["case"], "", "", "", "", "", "", "", "skipped: " + r["skipped"]))
            continue
        t = r.get("truth") or {}
        if r.get("error") and "score" not in r:
            rows.append((r["case"], "(%s)" % t.get("state", "?"), "(%s)" % t.get("category", "?"), "(%s)" % t.get("culprits", "?"),
                         "", str(r.get("text_bytes", "")), str(r.get("json_bytes", "")), str(r.get("ms", "")),
                         "ERROR: " + r["error"].splitlines()[0][:120]))
            continue
        g, s = r["got"], r["score"]
        w = g.get("where") or {}
        fr = "%s:%s" % (os.path.basename(w.get("file") or ""), w.get("function") or "") if w else ""
        if t.get("function") and not s["frame"]:
            fr = "%s (%s:%s)" % (fr or "none", t["file"], t["function"])
        bad = wrong(r)
        rows.append((r["case"],
                     "%s (%s)" % (g["state"], t["state"]) if not s["state"] else g["state"],
                     "%s (%s)" % (g["category"], t["category"]) if not s["category"] else g["category"],
                     "%s (%s)" % (g["culprits"] or "''", t["culprits"] or "''") if not s["culprit"] else (g["culprits"] or "''"),
                     fr if s["frame"] else ("%s WRONG" % fr if s["frame"] is False else "-"),
                     str(r["text_bytes"]), str(r["json_bytes"]), "%.0f" % r["ms"],
                     "ok" if not bad else "WRONG: " + ",".join(bad)))
    return rows


def totals(results):
    scored = [r for r in results if not r.get("skipped")]
    ok = [r for r in scored if "score" in r]

    def count(k):
        applicable = [r for r in scored if k != "frame" or (r.get("truth") or {}).get("function")]
        n = sum(1 for r in applicable if "score" in r and r["score"][k])
        return n, len(applicable)

    t = {k: count(k) for k in ("culprit", "category", "state", "frame")}
    t["right"] = (sum(1 for r in scored if not wrong(r)), len(scored))
    t["errors"] = sum(1 for r in scored if r.get("error"))
    t["skipped"] = len(results) - len(scored)
    for k in ("text_bytes", "json_bytes", "ms"):
        vs = [r[k] for r in ok]
        t[k] = {"median": statistics.median(vs) if vs else 0, "max": max(vs) if vs else 0}
    return t


def render_text(results, t):
    rows = table_rows(results)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(row[:-1])) + "  " + row[-1])
    lines.append("")
    lines.append(totals_line(t))
    return "\n".join(lines)


def totals_line(t):
    f = lambda k: "%d/%d" % t[k]
    return ("cases right %s; culprit exact %s, category %s, state %s, frame %s; errors %d, skipped %d; "
            "text bytes median %d max %d; json bytes median %d max %d; latency ms median %.0f max %.0f" % (
                f("right"), f("culprit"), f("category"), f("state"), f("frame"), t["errors"], t["skipped"],
                t["text_bytes"]["median"], t["text_bytes"]["max"], t["json_bytes"]["median"], t["json_bytes"]["max"],
                t["ms"]["median"], t["ms"]["max"]))


def render_markdown(results, t, argv):
    md = ["Scored on %s UTC, %s, commit %s, with `%s`." % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), corpus.machine(), corpus.commit(),
        " ".join(["python3", "evals/score.py"] + argv)), ""]
    rows = table_rows(results)
    esc = lambda c: c.replace("|", "\\|")
    md.append("| " + " | ".join(rows[0]) + " |")
    md.append("|" + "---|" * len(rows[0]))
    for row in rows[1:]:
        md.append("| " + " | ".join(esc(c) for c in row) + " |")
    md += ["", "Totals: " + totals_line(t) + "."]
    wrongs = [r for r in results if wrong(r)]
    if wrongs:
        md += ["", "Wrong cases, with what diagnose_hang said:", ""]
        for r in wrongs:
            md.append("- `%s` (%s): %s" % (r["case"], ", ".join(wrong(r)),
                                            (r.get("error") or (r.get("report") or {}).get("summary", "")).replace("\n", " ")[:600]))
    return "\n".join(md) + "\n"


# ------------------------------------------------------------------- main

def options(argv):
    """score.py's command line (agent.py reads the same, with --agent's own)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--torch-free", action="store_true", help="only the torch-free job (socket_job.py)")
    ap.add_argument("--python-torch", metavar="PATH", help="interpreter with torch for the torch jobs' cases (%s)" % ", ".join(corpus.TORCH_JOBS))
    ap.add_argument("--all-torch", action="store_true", help="every world and post-mortem form the torch job lists")
    ap.add_argument("--bin", default=os.path.join(REPO, "bin", "probing-mcp"), help="the probing-mcp binary (default bin/probing-mcp)")
    ap.add_argument("--json", metavar="OUT", help="write every case's result (the reports too) as JSON")
    ap.add_argument("--markdown", metavar="OUT", help="write the table (with date, machine, commit) as Markdown")
    ap.add_argument("--check", action="store_true", help="exit 1 if any case is wrong or failed (with --agent: if the harness "
                    "failed on a case, or a case regressed past --baseline)")
    ap.add_argument("--jobs", type=int, default=2, metavar="N", help="cases run at once (default 2)")
    ap.add_argument("--only", metavar="SUBSTR", help="only the cases whose name contains SUBSTR")
    ap.add_argument("--stall-seconds", type=int, default=DEFAULT_STALL_S,
                    help="diagnose_hang's stall_seconds; a hung case is diagnosed once hung this long + 2 s (default %d)" % DEFAULT_STALL_S)
    ap.add_argument("--keep", action="store_true", help="keep each case's temp dir (logs, rings) and print where")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--agent", action="store_true", help="run the scripted agent harness (evals/agent.py) instead: a whole "
                    "investigation per case, following the server's own guidance, measured (calls, characters, root cause by call k, consistency)")
    ap.add_argument("--baseline", metavar="FILE", help="with --agent: compare each case with this baseline (--write-baseline's, or an "
                    "--agent --json): a root cause lost, found by a later call, or read in over 1.5x the characters is a regression "
                    "(listed; --check fails on it)")
    ap.add_argument("--write-baseline", metavar="FILE", help="with --agent: write each case's calls and root cause as a baseline")
    opt = ap.parse_args(argv)
    if opt.jobs < 1:
        ap.error("--jobs %d: want 1 or more" % opt.jobs)
    if opt.torch_free and opt.python_torch:
        ap.error("--torch-free and --python-torch exclude each other")
    if (opt.baseline or opt.write_baseline) and not opt.agent:
        ap.error("--baseline and --write-baseline are for --agent runs")
    if not opt.list:
        if not (os.path.isfile(opt.bin) and os.access(opt.bin, os.X_OK)):
            ap.error("no probing-mcp binary at %s: run `make build` or pass --bin PATH" % opt.bin)
        try:
            import mcp  # noqa: F401
        except ImportError:
            ap.error("%s cannot import the MCP Python SDK (pip package mcp): run it with the venv of "
                     "`python3 -m venv .venv && .venv/bin/pip install -r mcp/testdata/e2e/requirements.txt`" % sys.executable)
    return ap, opt


def main(argv=None):
    corpus.install_signals()
    argv = sys.argv[1:] if argv is None else argv
    ap, opt = options(argv)
    cases, skipped = corpus.select_cases(opt)
    if opt.list:
        for c in cases:
            print(c.name)
        for name, why in skipped:
            print("%s  (skipped: %s)" % (name, why))
        return 0
    if not cases:
        ap.error("no case matches --only %r (see --list)" % opt.only)
    if opt.agent:
        import agent
        return agent.run(cases, skipped, opt, argv)

    for name, why in skipped:
        print("skipping %s: %s" % (name, why), file=sys.stderr)

    def done(r):
        bad = wrong(r)
        print("%-40s %s (%.0f s)" % (r["case"], "ok" if not bad else "WRONG: " + ",".join(bad), r.get("total_s", 0)),
              file=sys.stderr, flush=True)
        if opt.keep and r.get("tmp"):
            print("    kept %s" % r["tmp"], file=sys.stderr)

    t0 = time.monotonic()
    results = corpus.run_all(cases, opt.jobs, lambda c: run_case(c, opt), done)
    if results is None:
        return 130
    results += [{"case": n, "skipped": why} for n, why in skipped]
    t = totals(results)
    print(render_text(results, t))
    print("(%d case(s) in %.0f s, --jobs %d)" % (len(cases), time.monotonic() - t0, opt.jobs))
    for r in results:
        bad = wrong(r)
        if bad:
            print("\n%s is wrong (%s):\n  truth: %s\n  %s" % (r["case"], ", ".join(bad), json.dumps(r.get("truth")),
                                                           (r.get("error") or r.get("text", "")).replace("\n", "\n  ")))
    if opt.json:
        with open(opt.json, "w") as f:
            json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "machine": corpus.machine(),
                       "commit": corpus.commit(), "argv": argv, "totals": t, "cases": results}, f, indent=1)
    if opt.markdown:
        with open(opt.markdown, "w") as f:
            f.write(render_markdown(results, t, argv))
    if opt.check and any(wrong(r) for r in results):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
