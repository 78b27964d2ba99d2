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

Needs the `mcp` package (mcp/testdata/e2e/requirements.txt) in the
interpreter running it, and the built binary (make build, or --bin).
"""
import argparse
import builtins
import concurrent.futures
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
JOBS = os.path.join(HERE, "jobs")

READY_TIMEOUT_S = 240     # a launcher bounds itself (180 s) and says why it failed
CALL_TIMEOUT_S = 90       # one diagnose_hang call, server start included
STOP_TIMEOUT_S = 30       # a launcher's clean-up after SIGTERM
DEFAULT_STALL_S = 3
_EXC_GROUP = getattr(builtins, "BaseExceptionGroup", ())  # 3.11+; anyio wraps errors in one

# The torch-free corpus: every scenario of the socket job at world 4,
# the ones whose picture changes with the world's size at 8 too, and
# the dead-job (post-mortem) forms.
SOCKET_CASES = (
    [("socket_job.py", s, 4, False) for s in (
        "cpu_stall", "missing_from_collective", "collective_mismatch", "collective_mismatch_op", "dead_rank",
        "main_thread_dead", "deadlock", "gil_held", "all_in_collective", "healthy", "straggler")]
    + [("socket_job.py", s, 8, False) for s in (
        "cpu_stall", "missing_from_collective", "dead_rank", "all_in_collective", "healthy", "straggler")]
    + [("socket_job.py", s, 4, True) for s in ("cpu_stall", "missing_from_collective", "dead_rank")]
    + [("socket_job.py", "unrecorded_cpu_stall", w, False) for w in (4, 8)]
    + [("socket_job.py", "dead_rank", 8, True)]
)
TORCH_JOB = "tp_gloo_job.py"
# The torch jobs: the tensor-parallel one written with the diagnosis, a
# DDP job written as ML engineers write one (DataLoader workers, torchrun,
# checkpoints with an upload command, validation), and a hand-written GPipe
# pipeline over send/recv.
TORCH_JOBS = (TORCH_JOB, "ddp_job.py", "pipeline_job.py")

# The spec's names (/work/notes/evals-spec.md): a truth outside them is
# the job's error, not a case to score.
STATES = ("healthy", "progressing", "slow", "paused", "stalled", "dead", "unknown")
CATEGORIES = ("cpu_stall", "missing_from_collective", "collective_mismatch", "dead_rank", "main_thread_dead",
              "deadlock", "gil_held", "all_in_collective", "gpu_fault", "straggler", "unreachable_rank", "healthy")


class Case(object):
    def __init__(self, job, scenario, world, post_mortem, python):
        self.job, self.scenario, self.world, self.post_mortem, self.python = job, scenario, world, post_mortem, python
        self.name = "%s:%s/%d%s" % (job.replace("_job.py", ""), scenario, world, "/pm" if post_mortem else "")
        self.result = {"case": self.name, "job": job, "scenario": scenario, "world": world, "post_mortem": post_mortem}


# ------------------------------------------------------------------ ranksets

def parse_rankset(text):
    """'0-2,5' -> {0, 1, 2, 5}; '' -> set(). Raises ValueError on bad text."""
    out = set()
    for part in (text or "").replace(" ", "").split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if sep:
            out.update(range(int(lo), int(hi) + 1))
        else:
            out.add(int(lo))
    return out


# --------------------------------------------------------------- processes

_live = set()          # launchers not yet stopped (for Ctrl-C)
_live_lock = threading.Lock()
_stopping = threading.Event()  # Ctrl-C: start no more launchers


def _alive(pid):
    """Whether pid is a live, non-zombie process."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def stop_launcher(p, pids):
    """SIGTERM the launcher, wait for it, then make sure none of its ranks
    is left (SIGKILL and report any). Returns the problems, [] if clean."""
    problems = []
    signalled = p.poll() is None
    if signalled:
        try:
            p.send_signal(signal.SIGTERM)
        except OSError:
            pass
        try:
            p.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            problems.append("the launcher did not exit within %d s of SIGTERM (killed)" % STOP_TIMEOUT_S)
            p.kill()
            p.wait()
    if signalled and p.returncode not in (0, None) and not problems:
        problems.append("the launcher exited %s after SIGTERM, not 0" % p.returncode)
    with _live_lock:
        _live.discard(p)
    left = []
    deadline = time.monotonic() + 10
    for pid in pids:
        # Reparented ranks are reaped by init: give it a moment.
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            left.append(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    if left:
        problems.append("rank processes left behind after the launcher exited: %s (killed)" % left)
    return problems


def _tail(path, n=20, head=0):
    """The last n lines of a log (and its first head lines: a launcher says
    why it failed first, then the ranks' logs)."""
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    if head and len(lines) > head + n:
        return "\n".join(lines[:head] + ["..."] + lines[-n:])
    return "\n".join(lines[-n:])


# ------------------------------------------------------------ the MCP call

def call_diagnose(binary, data_dir, ctrl_root, args, errlog_path):
    """Starts `binary serve` (stdio) and calls diagnose_hang once. Returns
    (result dict, latency ms)."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = dict(os.environ)
    for k in ("PROBING", "PROBING_MCP_AGENT"):
        env.pop(k, None)
    env.update({"PROBING_DATA_DIR": data_dir, "PROBING_CTRL_ROOT": ctrl_root})
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

def truth_problem(t):
    """Why a ready file's truth cannot be scored, or ""."""
    if not isinstance(t, dict):
        return "truth is %r, not an object" % (t,)
    if t.get("state") not in STATES:
        return "truth state %r: want one of %s" % (t.get("state"), ", ".join(STATES))
    if t.get("category") not in CATEGORIES:
        return "truth category %r: want one of %s" % (t.get("category"), ", ".join(CATEGORIES))
    try:
        parse_rankset(t.get("culprits", ""))
    except (ValueError, AttributeError):
        return "truth culprits %r: want a rankset like '0-2,5' ('' for none)" % (t.get("culprits"),)
    if bool(t.get("file")) != bool(t.get("function")):
        return "truth file %r and function %r: give both or neither" % (t.get("file"), t.get("function"))
    return ""


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
    r = case.result
    tmp = tempfile.mkdtemp(prefix="probing-eval-")
    data, ctrl, ready = os.path.join(tmp, "data"), os.path.join(tmp, "ctrl"), os.path.join(tmp, "ready.json")
    lout, lerr = os.path.join(tmp, "launcher.out"), os.path.join(tmp, "launcher.err")
    cmd = [case.python, os.path.join(JOBS, case.job), "--scenario", case.scenario, "--world", str(case.world),
           "--data-dir", data, "--ctrl-root", ctrl, "--ready-file", ready]
    if case.post_mortem:
        cmd.append("--post-mortem")
    p = None
    pids = []
    t_start = time.monotonic()
    try:
        with _live_lock:
            if _stopping.is_set():
                r["error"] = "interrupted"
                return r
            with open(lout, "wb") as fo, open(lerr, "wb") as fe:
                p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe, cwd=REPO)
            _live.add(p)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not os.path.exists(ready):
            if p.poll() is not None:
                r["error"] = "the launcher exited %s before its ready file:\n%s" % (p.returncode, _tail(lerr, 30, head=3))
                return r
            if time.monotonic() > deadline:
                r["error"] = "no ready file within %d s:\n%s" % (READY_TIMEOUT_S, _tail(lerr, 30, head=3))
                return r
            time.sleep(0.1)
        with open(ready) as f:
            rf = json.load(f)
        pids = [int(x) for x in rf.get("pids", [])]
        truth = rf.get("truth")
        why = truth_problem(truth)
        if why:
            r["error"] = "the ready file %s: %s" % (case.job, why)
            return r
        r["truth"] = truth
        r["ready_s"] = round(time.monotonic() - t_start, 1)
        # A hang is a stall only once it has lasted past the threshold: wait
        # until the ranks' last activity (before settled_at) is that old,
        # past stall_seconds and past the diagnosis's own threshold of 10
        # typical steps (the job's step_s: slower on a loaded machine; at
        # most a minute).
        if truth.get("state") in ("stalled", "dead") and rf.get("settled_at"):
            own = min(60.0, 10 * float(rf.get("step_s") or 0))
            wait = float(rf["settled_at"]) + max(opt.stall_seconds, own) + 2 - time.time()
            if wait > 0:
                time.sleep(wait)
        args = {"stall_seconds": opt.stall_seconds}
        try:
            out = call_diagnose(opt.bin, data, ctrl, args, os.path.join(tmp, "server.err"))
        except Exception as e:  # an exception group from anyio, a timeout: the case's failure
            while isinstance(e, _EXC_GROUP) and e.exceptions:
                e = e.exceptions[0]
            r["error"] = "diagnose_hang call failed: %s: %s\n%s" % (type(e).__name__, e, _tail(os.path.join(tmp, "server.err")))
            return r
        rep = out.get("structured")
        r["ms"] = round(out["ms"], 1)
        r["text_bytes"] = len(out["text"].encode())
        r["json_bytes"] = len(json.dumps(rep, separators=(",", ":")).encode()) if rep is not None else 0
        r["text"] = out["text"]
        r["report"] = rep
        if out["is_error"] or rep is None:
            r["error"] = "diagnose_hang returned %s: %s" % ("an error" if out["is_error"] else "no structured content", out["text"][:2000])
            return r
        r["score"] = score(rep, truth)
        hyps = rep.get("hypotheses") or []
        top = hyps[0] if hyps else {}
        r["got"] = {"state": rep.get("state"), "category": top.get("category", ""),
                    "culprits": top.get("culprit_ranks", ""), "where": top.get("where")}
        return r
    finally:
        if p is not None:
            problems = stop_launcher(p, pids)
            if problems:
                r["error"] = "; ".join(([r["error"]] if r.get("error") else []) + problems)
        if opt.keep:
            r["tmp"] = tmp
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        r["total_s"] = round(time.monotonic() - t_start, 1)


def wrong(r):
    """Why a case is wrong ([] when right)."""
    if r.get("skipped"):
        return []
    if r.get("error"):
        return ["error"]
    return [k for k, v in r["score"].items() if v is False]


# ------------------------------------------------------------------ cases

# The torch job's cases are chosen from its own --list (its scenario names
# are its own): every scenario at world 4, the ones whose picture changes
# with the world's size at 8 too, and the dead-job form of the stalls and
# deaths; --all-torch takes every world and post-mortem form it lists.
TORCH_AT_8 = ("cpu_stall", "missing_from_collective", "dead_rank", "all_in_collective", "straggler")
TORCH_POST_MORTEM = ("cpu_stall", "missing_from_collective", "dead_rank", "loader_stuck", "upload_stuck")


def torch_cases(python, everything=False, name=TORCH_JOB):
    """A torch job's cases, from its own --list, or (None, why)."""
    TORCH_JOB = name  # noqa: N806 (the messages below name this job)
    job = os.path.join(JOBS, TORCH_JOB)
    if not os.path.exists(job):
        return None, "%s does not exist" % os.path.relpath(job, REPO)
    try:
        subprocess.run([python, "-c", "import torch, torch.distributed"], check=True, timeout=300,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except subprocess.CalledProcessError as e:
        return None, "%s cannot import torch: %s" % (python, (e.stderr or b"").decode("utf-8", "replace").strip()[-300:])
    except (OSError, subprocess.SubprocessError) as e:
        return None, "%s cannot import torch: %s" % (python, e)
    try:
        res = subprocess.run([python, job, "--list"], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        return None, "%s --list failed: %s" % (TORCH_JOB, e)
    if res.returncode != 0:
        return None, "%s --list exited %d: %s" % (TORCH_JOB, res.returncode, res.stderr.strip()[-500:])
    cases = []
    for line in res.stdout.splitlines():
        # "name 4,8 [post-mortem]": the worlds are the numbers after the name.
        toks = line.replace(",", " ").split()
        if not toks:
            continue
        name = toks[0]
        worlds = sorted(int(t) for t in toks[1:] if t.isdigit()) or [8]
        pm = any(t.lower() in ("post-mortem", "post_mortem") for t in toks[1:])
        for w in worlds:
            if everything or w == worlds[0] or name.startswith(TORCH_AT_8):
                cases.append((TORCH_JOB, name, w, False))
            if pm and (everything or (w == worlds[0] and name.startswith(TORCH_POST_MORTEM))):
                cases.append((TORCH_JOB, name, w, True))
    if not cases:
        return None, "%s --list printed no scenarios" % TORCH_JOB
    return cases, ""


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


def machine():
    u = platform.uname()
    return "%d CPUs (nproc), %s %s %s" % (os.cpu_count() or 0, u.system, u.release, u.machine)


def commit():
    try:
        h = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True).stdout.strip()
        return h + ("+dirty" if dirty else "")
    except OSError:
        return "unknown"


def render_markdown(results, t, argv):
    md = ["Scored on %s UTC, %s, commit %s, with `%s`." % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), machine(), commit(),
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

def _interrupted(signum, frame):
    raise KeyboardInterrupt()


def main(argv=None):
    # SIGTERM (a test's timeout, a CI cancel) stops the launchers as Ctrl-C
    # does; so does SIGINT when a shell started us in the background.
    signal.signal(signal.SIGTERM, _interrupted)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, _interrupted)
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--torch-free", action="store_true", help="only the torch-free job (socket_job.py)")
    ap.add_argument("--python-torch", metavar="PATH", help="interpreter with torch for %s's cases" % TORCH_JOB)
    ap.add_argument("--all-torch", action="store_true", help="every world and post-mortem form the torch job lists")
    ap.add_argument("--bin", default=os.path.join(REPO, "bin", "probing-mcp"), help="the probing-mcp binary (default bin/probing-mcp)")
    ap.add_argument("--json", metavar="OUT", help="write every case's result (the reports too) as JSON")
    ap.add_argument("--markdown", metavar="OUT", help="write the table (with date, machine, commit) as Markdown")
    ap.add_argument("--check", action="store_true", help="exit 1 if any case is wrong or failed")
    ap.add_argument("--jobs", type=int, default=2, metavar="N", help="cases run at once (default 2)")
    ap.add_argument("--only", metavar="SUBSTR", help="only the cases whose name contains SUBSTR")
    ap.add_argument("--stall-seconds", type=int, default=DEFAULT_STALL_S,
                    help="diagnose_hang's stall_seconds; a hung case is diagnosed once hung this long + 2 s (default %d)" % DEFAULT_STALL_S)
    ap.add_argument("--keep", action="store_true", help="keep each case's temp dir (logs, rings) and print where")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    opt = ap.parse_args(argv)
    if opt.jobs < 1:
        ap.error("--jobs %d: want 1 or more" % opt.jobs)
    if opt.torch_free and opt.python_torch:
        ap.error("--torch-free and --python-torch exclude each other")
    if not opt.list:
        if not (os.path.isfile(opt.bin) and os.access(opt.bin, os.X_OK)):
            ap.error("no probing-mcp binary at %s: run `make build` or pass --bin PATH" % opt.bin)
        try:
            import mcp  # noqa: F401
        except ImportError:
            ap.error("%s cannot import the MCP Python SDK (pip package mcp): run it with the venv of "
                     "`python3 -m venv .venv && .venv/bin/pip install -r mcp/testdata/e2e/requirements.txt`" % sys.executable)

    specs = [(c, sys.executable) for c in SOCKET_CASES]
    skipped = []
    if not opt.torch_free:
        for tj in TORCH_JOBS:
            if not opt.python_torch:
                skipped.append(("%s:*" % tj.replace("_job.py", ""), "no --python-torch interpreter given"))
                continue
            tc, why = torch_cases(opt.python_torch, opt.all_torch, tj)
            if tc is None:
                skipped.append(("%s:*" % tj.replace("_job.py", ""), why))
            else:
                specs += [(c, opt.python_torch) for c in tc]
    cases = [Case(j, s, w, pm, py) for (j, s, w, pm), py in specs]
    if opt.only:
        cases = [c for c in cases if opt.only in c.name]
        skipped = [s for s in skipped if opt.only in s[0] or opt.only.startswith(("tp_gloo", "ddp", "pipeline"))]
    if opt.list:
        for c in cases:
            print(c.name)
        for name, why in skipped:
            print("%s  (skipped: %s)" % (name, why))
        return 0
    if not cases:
        ap.error("no case matches --only %r (see --list)" % opt.only)

    for name, why in skipped:
        print("skipping %s: %s" % (name, why), file=sys.stderr)

    results = []
    t0 = time.monotonic()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=opt.jobs)
    try:
        futs = {pool.submit(run_case, c, opt): c for c in cases}
        for fut in concurrent.futures.as_completed(futs):
            r = fut.result()
            bad = wrong(r)
            print("%-40s %s (%.0f s)" % (r["case"], "ok" if not bad else "WRONG: " + ",".join(bad), r.get("total_s", 0)),
                  file=sys.stderr, flush=True)
            if opt.keep and r.get("tmp"):
                print("    kept %s" % r["tmp"], file=sys.stderr)
    except KeyboardInterrupt:
        _stopping.set()
        pool.shutdown(wait=False, cancel_futures=True)
        with _live_lock:
            live = list(_live)
        for p in live:
            try:
                p.send_signal(signal.SIGTERM)
            except OSError:
                pass
        pool.shutdown(wait=True)  # each case stops its launcher and checks its ranks are gone
        print("interrupted: every launcher stopped", file=sys.stderr)
        return 130
    finally:
        pool.shutdown(wait=True)
    order = {c.name: i for i, c in enumerate(cases)}
    results = sorted((c.result for c in cases), key=lambda r: order[r["case"]])
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
            json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "machine": machine(),
                       "commit": commit(), "argv": argv, "totals": t, "cases": results}, f, indent=1)
    if opt.markdown:
        with open(opt.markdown, "w") as f:
            f.write(render_markdown(results, t, argv))
    if opt.check and any(wrong(r) for r in results):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
