"""The agent never stalls the process it lives in.

The design (activation.py): Python calls meta-path finders holding its
global import lock, and a thread importing a module holds that module's lock
while it waits for the global one. So the agent's import hooks only set an
Event (no import, no wait, no lock anyone holds while importing); the
start-up's imports run in one background thread that holds no lock of the
agent's; no lock of the agent's is ever held across an import; and no
thread waits for the background part except agent threads and wait_ready().

Three checks:
* the audit: one process runs everything the agent does at start-up and in
  use (site hook, node daemon start, torch's import, the recorders, the
  control socket's endpoints, exit records) with every lock the agent
  creates replaced by a tracked one, and every import and lock acquisition
  checked: no import while the thread holds an agent lock, and neither an
  import nor an agent lock from under Python's global import lock (inside a
  finder's find_spec);
* the stress test: hundreds of short agent-enabled processes, the node
  daemon start on (the default; half through an install record, which
  imports json in the starter thread, the deadlock of issue 22), each
  importing a torch-like module tree at once, with two CPU burners running
  beside them; none may stall;
* with real torch (skipped without it): `import torch` in many processes,
  and jobs under torchrun with the node daemon on.

A stall is a process that never ends. Each child arms faulthandler's
watchdog in its own sitecustomize, before the site hook, to dump every
thread's stack and exit after STALL_S: the failure then shows where each
thread waited (the proof), not only that time ran out. A normal child ends
in well under a second.
"""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import core_helpers as H

STALL_S = int(os.environ.get("PMCP_STALL_S", "120"))


@pytest.fixture()
def tree():
    t = H.Env()
    yield t
    t.cleanup()

# A module tree shaped like torch's import: many standard-library modules
# (logging, json, re, subprocess, ... which the agent's own threads import
# too), a thread that imports while the package is being imported, and the
# two submodules the recorders watch (torch.distributed, torch.optim.optimizer).
TORCH_LIKE = {
    "torch/__init__.py": (
        "__version__ = '9.9.9+fake'\n"
        "import logging, json, re, typing, dataclasses, inspect, warnings\n"
        "import threading\n"
        "def _bg():\n"
        "    import decimal, fractions, subprocess  # noqa: F401\n"
        "_t = threading.Thread(target=_bg)\n"
        "_t.start()\n"
        "from . import _utils\n"
        "from . import distributed\n"
        "from . import optim\n"
        "_t.join()\n"),
    "torch/_utils.py": "import collections, functools, enum, traceback, pickle, copy, string, textwrap\n",
    "torch/distributed/__init__.py": (
        "import datetime, socket, struct\n"
        "_init = False\n"
        "def is_available():\n    return True\n"
        "def is_initialized():\n    return _init\n"
        "def init_process_group(*a, **k):\n    global _init\n    _init = True\n"
        "def get_rank():\n    return 0\n"
        "def get_world_size():\n    return 1\n"
        "def barrier(*a, **k):\n    return None\n"
        "def all_reduce(*a, **k):\n    return None\n"),
    "torch/optim/__init__.py": "from .optimizer import Optimizer  # noqa: F401\n",
    "torch/optim/optimizer.py": (
        "import weakref, itertools\n"
        "class Optimizer(object):\n"
        "    def __init__(self, params):\n        self.params = list(params)\n"
        "    def step(self, closure=None):\n        return None\n"),
}

# The children's first line, armed before the site hook runs (sitecustomize
# imports before site.addsitedir processes the agent's .pth).
WATCHDOG = "import faulthandler\nfaulthandler.dump_traceback_later(%d, exit=True)\n" % STALL_S


def _tree(tree, audit=False, record=False, fake=True):
    """Writes the torch-like tree and a boot dir whose sitecustomize arms
    the watchdog (and, with audit, installs AUDIT) before the site hook.
    With record, a copy of the agent package with an install record naming
    a fake daemon goes first on the path. Returns the PYTHONPATH."""
    if fake:
        for rel, text in TORCH_LIKE.items():
            tree.write("fake/" + rel, text)
    boot = os.path.join(tree.root, "boot-nostall" + ("-audit" if audit else ""))
    os.makedirs(boot, exist_ok=True)
    with open(os.path.join(boot, "sitecustomize.py"), "w") as f:
        f.write(WATCHDOG + (AUDIT if audit else "") + "import site\nsite.addsitedir(%r)\n" % tree.site)
    daemon = tree.write("bin/fake-probing-mcp", "#!/bin/sh\nexit 0\n")
    os.chmod(daemon, 0o755)
    parts = [boot]
    if record:
        copy = os.path.join(tree.root, "agent-copy")
        if not os.path.isdir(copy):
            shutil.copytree(H.PKG, os.path.join(copy, "probing_mcp_agent"),
                            ignore=shutil.ignore_patterns("__pycache__", "node_bin.json"))
            with open(os.path.join(copy, "probing_mcp_agent", "node_bin.json"), "w") as f:
                json.dump({"path": daemon}, f)
        parts.append(copy)
    parts.append(H.AGENT_PY)
    if fake:
        parts.append(os.path.join(tree.root, "fake"))
    return os.pathsep.join(parts), daemon


def _env(tree, pythonpath, daemon, record, **extra):
    # The node daemon's start on, as by default: only local rank 0 starts
    # one, so every child is local rank 0.
    kw = dict(PROBING="1", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
              PROBING_MCP_NODE=None, PROBING_MCP_BIN=None if record else daemon)
    kw.update(extra)
    e = tree.env(**kw)
    e["PYTHONPATH"] = pythonpath
    return e


def _stalled(out, err):
    return "Timeout (0:" in err or "most recent call first" in err


# -- the audit ---------------------------------------------------------------

# Installed by the child's sitecustomize before the agent is imported.
AUDIT = r'''
import builtins as _b, sys as _s, threading as _th, atexit as _ax, os as _os
_tls = _th.local()
_VIOL = []
_USED = {}
_real_lock, _real_rlock, _real_import = _th.Lock, _th.RLock, _b.__import__

def _frames(f, n=14):
    out = []
    while f is not None and len(out) < n:
        out.append("%s:%d %s" % (f.f_code.co_filename, f.f_lineno, f.f_code.co_name))
        f = f.f_back
    return out

def _under_find_spec(f):
    while f is not None:
        if f.f_code.co_name == "_find_spec" and "importlib._bootstrap" in f.f_code.co_filename:
            return True
        f = f.f_back
    return False

def _held():
    h = getattr(_tls, "held", None)
    if h is None:
        h = _tls.held = []
    return h

class _Tracked(object):
    def __init__(self, inner, site):
        self._l, self.site = inner, site
    def acquire(self, blocking=True, timeout=-1):
        f = _s._getframe(1)
        if _under_find_spec(f):
            _VIOL.append({"kind": "agent lock taken under the import lock", "lock": self.site,
                          "thread": _th.current_thread().name, "stack": _frames(f)})
        ok = self._l.acquire(blocking, timeout)
        if ok:
            _held().append(self)
            _USED[self.site] = _USED.get(self.site, 0) + 1
        return ok
    def release(self):
        h = _held()
        for i in range(len(h) - 1, -1, -1):
            if h[i] is self:
                del h[i]
                break
        self._l.release()
    def __enter__(self):
        return self.acquire()
    def __exit__(self, *a):
        self.release()
    def locked(self):
        return self._l.locked() if hasattr(self._l, "locked") else False
    def __getattr__(self, n):
        return getattr(self._l, n)

def _factory(real):
    def make(*a, **k):
        name = _s._getframe(1).f_globals.get("__name__", "")
        lk = real(*a, **k)
        if name.startswith("probing_mcp_agent"):
            f = _s._getframe(1)
            return _Tracked(lk, "%s:%d" % (name, f.f_lineno))
        return lk
    return make

_th.Lock, _th.RLock = _factory(_real_lock), _factory(_real_rlock)

# Modules loaded before any agent code ran can never be mid-import later:
# importing one is a dictionary look-up that cannot wait on anything.
_EARLY = frozenset(_s.modules)

def _absolute(name, globals, level):
    if not level:
        return name
    pkg = (globals or {}).get("__package__") or (globals or {}).get("__name__", "").rpartition(".")[0]
    base = pkg.rsplit(".", level - 1)[0] if level > 1 else pkg
    return base + ("." + name if name else "")

def _import(name, globals=None, locals=None, fromlist=(), level=0):
    f = _s._getframe(1)
    g = f.f_globals.get("__name__", "") if f is not None else ""
    h = getattr(_tls, "held", None)
    if h and _absolute(name, globals, level) not in _EARLY:
        _VIOL.append({"kind": "import while holding an agent lock", "import": name, "from": g,
                      "locks": [x.site for x in h], "thread": _th.current_thread().name, "stack": _frames(f)})
    elif g.startswith("probing_mcp_agent") and _under_find_spec(f):
        _VIOL.append({"kind": "import under the import lock", "import": name, "from": g,
                      "thread": _th.current_thread().name, "stack": _frames(f)})
    return _real_import(name, globals, locals, fromlist, level)

_b.__import__ = _import

def _report():
    p = _os.environ.get("PMCP_AUDIT_OUT")
    if p:
        with open(p, "w") as fh:
            fh.write(repr({"violations": _VIOL, "used": _USED}))
_ax.register(_report)
'''

AUDIT_CHILD = r'''
import os, sys, threading, time
import torch                      # the torch-like tree: wakes the background part
import torch.distributed as dist
import probing_mcp_agent as pa
assert pa.wait_ready(120), "the agent's start-up did not finish"
from probing_mcp_agent import spans

dist.init_process_group("gloo")
opt = torch.optim.Optimizer([1, 2])

def work(i):
    for step in range(20):
        with spans.span("load_batch", step=step):
            pass
        with pa.record_collective("all_reduce", [0, 1], rank=0, nbytes=4096):
            pass
        opt.step()
        if i == 0 and step == 5:
            import xml.dom.minidom  # noqa: F401  (an import while the others record)

ts = [threading.Thread(target=work, args=(i,)) for i in range(3)]
for t in ts:
    t.start()
work(9)
for t in ts:
    t.join()
print("UP", flush=True)
sys.stdin.readline()  # the parent asks the control socket meanwhile
raise RuntimeError("the end of the audit job")  # the exit records
'''


def test_core_no_lock_held_across_an_import(tree):
    """Everything the agent does, with every agent lock tracked: no import
    while one is held, and nothing of ours under Python's import lock."""
    pythonpath, daemon = _tree(tree, audit=True, record=True)
    out = os.path.join(tree.root, "audit.txt")
    script = tree.write("audit_child.py", AUDIT_CHILD)
    env = _env(tree, pythonpath, daemon, True, PMCP_AUDIT_OUT=out, PROBING_MCP_COMPLETE_AFTER="0")
    p = H.spawn([script], env)
    try:
        H.readline(p, want="UP", timeout=STALL_S)
        sock = H.wait_path(tree.sock(p.pid))
        for path in ("/health", "/ready", "/apis/overview", "/apis/identity", "/apis/stacks",
                     "/apis/pythonext/callstack", "/config", "/config/_keys", "/apis/nodes"):
            H.get(sock, path)
        H.request(sock, "POST", "/apis/pythonext/flight-recorder/snapshot", body=b"{}")
        H.request(sock, "PUT", "/config", body=json.dumps({"probing.sample_rate": "0.5"}).encode())
        _, err = p.communicate("go\n", timeout=STALL_S + 60)
    finally:
        H.stop(p)
    assert not _stalled("", err), err[-6000:]
    assert os.path.exists(out), "the audit did not report (the child died early?): " + err[-3000:]
    import ast

    rep = ast.literal_eval(open(out).read())
    viol = rep["violations"]
    assert viol == [], ("%d violations\n" % len(viol)) + "\n\n".join("%s: %s\n  %s" % (v["kind"], dict((k, v[k]) for k in v if k not in ("kind", "stack")),
                                                     "\n  ".join(v["stack"])) for v in viol[:int(os.environ.get("PMCP_AUDIT_SHOW", "8"))])
    # The audit saw the agent work: the job ran to its end, and the locks
    # of the start-up, the identity, the config, the recorders and the exit
    # records were tracked and taken.
    assert "the end of the audit job" in err, err[-3000:]
    used = set(k.split(":")[0] for k in rep["used"])
    for mod in ("runtime", "config", "tables", "memt", "exits", "activation"):
        assert "probing_mcp_agent." + mod in used, (mod, sorted(rep["used"]))


# -- the stress test -----------------------------------------------------------

STRESS_CHILD = r'''
import os, random, sys, time
time.sleep(random.random() * float(os.environ.get("PMCP_JITTER", "0")))
import torch
import torch.distributed
if os.environ.get("PMCP_SPAN"):
    import probing_mcp_agent as pa
    with pa.record_collective("all_reduce", [0], rank=0, nbytes=8):
        pass
print("ok", flush=True)
'''

STRESS_N = int(os.environ.get("PMCP_STRESS_N", "240"))
STRESS_PARALLEL = 4


@contextlib.contextmanager
def _under_load(n):
    """n CPU burners (processes of this test's own) for the block's time."""
    code = "import time\nend = time.time() + 3600\nwhile time.time() < end:\n    pass\n"
    burn = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    try:
        yield
    finally:
        for b in burn:
            b.kill()
            b.wait()


def _run_many(cmds):
    """Runs (argv, env) pairs STRESS_PARALLEL at a time; returns the ones
    that failed as (index, rc, stdout, stderr)."""
    bad, running, i = [], [], 0
    while i < len(cmds) or running:
        while i < len(cmds) and len(running) < STRESS_PARALLEL:
            argv, env = cmds[i]
            running.append((i, subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE)))
            i += 1
        idx, p = running.pop(0)
        try:
            out, err = p.communicate(timeout=STALL_S + 60)  # the child's own watchdog ends it first
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        out, err = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        if p.returncode != 0 or out.strip() != "ok":
            bad.append((idx, p.returncode, out, err))
    return bad


def test_core_startup_stress_no_stall(tree):
    """Hundreds of short agent-enabled processes under CPU load, each
    importing a torch-like tree at once, the node daemon's start on: none
    stalls, and none prints anything but its own line."""
    plain_pp, daemon = _tree(tree)
    record_pp, _ = _tree(tree, record=True)
    script = tree.write("stress_child.py", STRESS_CHILD)
    afters = [None, "0", "0.005", "-1"]
    cmds = []
    for i in range(STRESS_N):
        record = i % 2 == 0
        extra = {"PROBING_MCP_COMPLETE_AFTER": afters[(i // 2) % len(afters)]}
        if i % 3 == 0:
            extra["PMCP_JITTER"] = "0.02"
        if i % 5 == 0:
            extra["PMCP_SPAN"] = "1"
        cmds.append(([H.PYTHON, script], _env(tree, record_pp if record else plain_pp, daemon, record, **extra)))
    t0 = time.time()
    with _under_load(2):
        bad = _run_many(cmds)
    took = time.time() - t0
    stalled = [b for b in bad if _stalled(b[2], b[3])]
    assert not stalled, "%d of %d processes stalled; the first:\n%s" % (len(stalled), STRESS_N, stalled[0][3][-6000:])
    assert not bad, "%d of %d processes failed; the first (rc %s):\n%s\n%s" % (
        len(bad), STRESS_N, bad[0][1], bad[0][2][-2000:], bad[0][3][-4000:])
    sys.stderr.write("stress: %d processes in %.1f s under load\n" % (STRESS_N, took))


# -- real torch ------------------------------------------------------------------

def _torch_python():
    from test_tables_torch import torch_python

    return torch_python()


def test_core_real_torch_import_no_stall(tree):
    """`import torch` with the agent and the node daemon's start on, the
    way issue 22 found rank 0 frozen (4 runs of 4 before the fix)."""
    py, _ = _torch_python()
    record_pp, daemon = _tree(tree, record=True, fake=False)
    script = tree.write("torch_child.py", "import torch, torch.distributed\nassert 'fake' not in torch.__version__\n"
                                          "print('ok', flush=True)\n")
    n = int(os.environ.get("PMCP_TORCH_STRESS_N", "16"))
    cmds = [([py, script], _env(tree, record_pp, daemon, True)) for _ in range(n)]
    with _under_load(1):
        bad = _run_many(cmds)
    assert not bad, "%d of %d failed; the first (rc %s):\n%s" % (len(bad), n, bad[0][1], bad[0][3][-6000:])


TORCHRUN_TRAIN = r'''
import os
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
for _ in range(3):
    dist.all_reduce(t)
dist.barrier()
if dist.get_rank() == 0:
    print("ok", dist.get_world_size(), flush=True)
dist.destroy_process_group()
'''


def test_core_torchrun_no_stall(tree):
    """`PROBING=1 torchrun --nproc-per-node 4 train.py`, as the README says,
    with the node daemon's start on (local rank 0 through an install
    record): every run ends, under load."""
    py, _ = _torch_python()
    record_pp, daemon = _tree(tree, record=True, fake=False)
    script = tree.write("train.py", TORCHRUN_TRAIN)
    with _under_load(1):
        for run in range(int(os.environ.get("PMCP_TORCHRUN_N", "3"))):
            env = _env(tree, record_pp, daemon, True, RANK=None, LOCAL_RANK=None, WORLD_SIZE=None,
                       MASTER_ADDR=None)
            r = subprocess.run([py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", script], env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=4 * (STALL_S + 60))
            assert r.returncode == 0 and "ok 4" in r.stdout, "run %d: rc %d\n%s\n%s" % (
                run, r.returncode, r.stdout[-2000:], r.stderr[-6000:])


# -- the one lock held across a call into torch -------------------------------------

def test_core_fr_snapshot_lock_never_waited_without_bound(monkeypatch):
    """fr's snapshot lock is held across torch's dump function: the
    exception hook (on the program's thread) never waits for it, and a
    client waits only up to its bound, then gets a SnapshotError saying why."""
    sys.path.insert(0, H.AGENT_PY)
    from probing_mcp_agent import fr

    monkeypatch.setattr(fr, "is_watchdog_error", lambda exc: True)
    monkeypatch.setattr(fr, "_on_watchdog", "auto")
    assert fr._lock.acquire(False)  # a snapshot in flight, stuck in torch
    try:
        t0 = time.monotonic()
        assert fr.on_exception(RuntimeError("gloo timeout")) is None  # at once, not after the dump
        with pytest.raises(fr.SnapshotError, match="still running"):
            fr.snapshot(wait=0.05)
        assert time.monotonic() - t0 < STALL_S
    finally:
        fr._lock.release()
