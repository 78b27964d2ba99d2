"""The scored corpus's cases and how one is run: shared by score.py (one
diagnose_hang call per case, scored) and agent.py (a scripted assistant's
whole investigation per case, measured).

A case is a job program in jobs/, a scenario, a world size, live or
post-mortem. run_case() makes fresh data and control dirs, starts the job's
launcher (the protocol: jobs/socket_job.py's docstring), waits for its ready
file (the pids and the truth) and for the hang to settle, hands the job to
the caller's body, then stops the launcher and checks that no rank is left.
run_all() runs cases a few at a time and stops every launcher on Ctrl-C or
SIGTERM. select_cases() is the corpus (score.py's --torch-free,
--python-torch, --all-torch, --only).
"""
import builtins
import concurrent.futures
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
JOBS = os.path.join(HERE, "jobs")

READY_TIMEOUT_S = 240     # a launcher bounds itself (180 s) and says why it failed
CALL_TIMEOUT_S = 90       # one MCP session (a diagnose_hang call, or an agent's investigation), server start included
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
    """One job, scenario and world; post_mortem: diagnosed after every
    process was SIGKILLed; watched: a `probing-mcp watch` captured the hang
    before the kill (post-mortem only)."""

    def __init__(self, job, scenario, world, post_mortem, python, watched=False):
        self.job, self.scenario, self.world, self.post_mortem, self.python = job, scenario, world, post_mortem, python
        self.watched = watched
        self.name = "%s:%s/%d%s" % (job.replace("_job.py", ""), scenario, world,
                                    "/watched" if watched else "/pm" if post_mortem else "")
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



def server_env(data_dir, ctrl_root):
    """The environment of `probing-mcp serve` reading one case's dirs."""
    env = dict(os.environ)
    for k in ("PROBING", "PROBING_MCP_AGENT"):
        env.pop(k, None)
    env.update({"PROBING_DATA_DIR": data_dir, "PROBING_CTRL_ROOT": ctrl_root})
    return env


def first_exception(e):
    """The first real error inside anyio's exception groups."""
    while isinstance(e, _EXC_GROUP) and e.exceptions:
        e = e.exceptions[0]
    return e


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
    res = t.get("resource")
    if res is not None and not (isinstance(res, dict) and res.get("what") and res.get("text")
                                and all(isinstance(s, str) and s for s in res["text"])):
        return "truth resource %r: want {\"what\": ..., \"text\": [strings an answer must show]}" % (res,)
    return ""



class Job(object):
    """A launched case, ready: its dirs, its ready file and truth."""

    def __init__(self, tmp, ready):
        self.tmp = tmp
        self.data, self.ctrl = os.path.join(tmp, "data"), os.path.join(tmp, "ctrl")
        self.ready = ready
        self.truth = ready.get("truth")
        self.server_err = os.path.join(tmp, "server.err")

    def tail_server_err(self):
        return _tail(self.server_err)


def run_case(case, opt, body):
    """Launches case, waits until its fault has settled, calls body(r, job)
    (which fills the result r = case.result; an exception it raises is the
    case's error), stops the launcher and returns r."""
    r = case.result
    tmp = tempfile.mkdtemp(prefix="probing-eval-")
    data, ctrl, ready = os.path.join(tmp, "data"), os.path.join(tmp, "ctrl"), os.path.join(tmp, "ready.json")
    lout, lerr = os.path.join(tmp, "launcher.out"), os.path.join(tmp, "launcher.err")
    cmd = [case.python, os.path.join(JOBS, case.job), "--scenario", case.scenario, "--world", str(case.world),
           "--data-dir", data, "--ctrl-root", ctrl, "--ready-file", ready]
    if case.post_mortem:
        cmd.append("--post-mortem")
    if case.watched:
        cmd += ["--watch-bin", opt.bin]
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
        try:
            body(r, Job(tmp, rf))
        except Exception as e:  # an exception group from anyio, a timeout: the case's failure
            e = first_exception(e)
            r["error"] = "%s: %s\n%s" % (type(e).__name__, e, _tail(os.path.join(tmp, "server.err")))
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


# ------------------------------------------------------------------ cases

# The torch job's cases are chosen from its own --list (its scenario names
# are its own): every scenario at world 4, the ones whose picture changes
# with the world's size at 8 too, and the dead-job form of the stalls and
# deaths; --all-torch takes every world and post-mortem form it lists.
TORCH_AT_8 = ("cpu_stall", "missing_from_collective", "dead_rank", "all_in_collective", "straggler")
TORCH_POST_MORTEM = ("cpu_stall", "missing_from_collective", "dead_rank", "loader_stuck", "upload_stuck")
# The DDP hangs that a SIGKILL leaves without a trace: their post-mortem
# once more, after a watcher captured them (ddp_job --watch-bin).
WATCHED = {"ddp_job.py": ("loader_stuck", "upload_stuck")}


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
            if pm and w == worlds[0] and name in WATCHED.get(TORCH_JOB, ()):
                cases.append((TORCH_JOB, name, w, "watched"))
    if not cases:
        return None, "%s --list printed no scenarios" % TORCH_JOB
    return cases, ""



def select_cases(opt):
    """The cases opt asks for (--torch-free, --python-torch, --all-torch,
    --only), and the families skipped with why: ([Case], [(name, why)])."""
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
    cases = [Case(j, s, w, bool(pm), py, pm == "watched") for (j, s, w, pm), py in specs]
    if opt.only:
        cases = [c for c in cases if opt.only in c.name]
        skipped = [s for s in skipped if opt.only in s[0] or opt.only.startswith(("tp_gloo", "ddp", "pipeline"))]
    return cases, skipped


def _interrupted(signum, frame):
    raise KeyboardInterrupt()


def install_signals():
    """SIGTERM (a test's timeout, a CI cancel) stops the launchers as Ctrl-C
    does; so does SIGINT when a shell started us in the background."""
    signal.signal(signal.SIGTERM, _interrupted)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, _interrupted)


def run_all(cases, jobs, run_one, done):
    """Runs run_one(case) for every case, jobs at a time, calling
    done(result) as each ends. Returns the results in the cases' order, or
    None when interrupted (every launcher stopped)."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    try:
        futs = {pool.submit(run_one, c): c for c in cases}
        for fut in concurrent.futures.as_completed(futs):
            done(fut.result())
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
        return None
    finally:
        pool.shutdown(wait=True)
    order = {c.name: i for i, c in enumerate(cases)}
    return sorted((c.result for c in cases), key=lambda r: order[r["case"]])


# ------------------------------------------------------------------ where

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
