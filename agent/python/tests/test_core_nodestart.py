"""The node daemon start (nodestart.py): local rank 0's agent starts
`probing-mcp node`, detached, without blocking or raising.

The process tests activate the agent through the real site hook in a child
interpreter and give it a fake probing-mcp (a shell script) that records its
argv, environment, cwd and /proc stat, then waits, like a daemon, until the
test stops it. The rules themselves (switch, leader, address, idle, where
the binary is found) are tested in-process on plan().
"""
import json
import os
import signal
import stat
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import core_helpers as H  # noqa: E402
from probing_mcp_agent import nodestart  # noqa: E402

FAKE = r'''#!/bin/sh
# A fake probing-mcp: records how it was started, then waits like a daemon.
out="$FAKE_OUT"
for a in "$0" "$@"; do printf '%s\n' "$a"; done > "$out.argv"
env -0 > "$out.env"
pwd > "$out.cwd"
cat /proc/$$/stat > "$out.stat"
echo $$ > "$out.pid.tmp" && mv "$out.pid.tmp" "$out.pid"
if [ -n "$FAKE_EXIT" ]; then exit "$FAKE_EXIT"; fi
i=0
while [ $i -lt 600 ] && [ ! -e "$out.stop" ]; do sleep 0.1; i=$((i+1)); done
'''

# The rank: waits (hang guards only) for the start thread to end and, when
# a daemon is expected, for the fake to have recorded itself; then lists
# its own children (a zombie among them is what the reaping prevents).
RANK = r'''
import json, os, sys, threading, time
if os.environ.get("RANK_MANUAL"):
    import probing_mcp_agent, probing_mcp_agent.nodestart as ns
    ns._SH = os.environ["RANK_MANUAL"]
    probing_mcp_agent.activate()
import probing_mcp_agent
from probing_mcp_agent import nodestart as ns
# The site hook ends the start-up (the node daemon's thread among it) in
# the background: wait for it (a hang guard).
assert probing_mcp_agent.wait_ready(30), "the agent's start-up did not finish"
for t in threading.enumerate():
    if t.name == "probing-mcp-node-start":
        t.join(30)
want = os.environ.get("FAKE_OUT")
if want and os.environ.get("RANK_WAIT_FAKE"):
    deadline = time.time() + 30
    while not os.path.exists(want + ".pid") and time.time() < deadline:
        time.sleep(0.02)

def children():
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rfind(")") + 2:].split()
        if int(fields[1]) == me:
            out.append((int(d), fields[0]))
    return out

# A child that has ended is reaped by then (sh at once, the fallback's
# daemon by the reaper thread): wait for no zombie, then report.
deadline = time.time() + 30
while any(st == "Z" for _, st in children()) and time.time() < deadline:
    time.sleep(0.02)
print(json.dumps({"pid": os.getpid(), "sid": os.getsid(0), "pgid": os.getpgid(0),
                  "children": children(), "plan": ns.last}))
'''


@pytest.fixture()
def tree():
    t = H.Env()
    t.rank = t.write("rank.py", RANK)
    t.fake = t.write("bin/probing-mcp", FAKE)
    os.chmod(t.fake, 0o755)
    t.out = os.path.join(t.root, "fake")
    yield t
    _stop_fake(t)
    t.cleanup()


def _stop_fake(t):
    try:
        with open(t.out + ".pid") as f:
            pid = int(f.read())
    except (OSError, ValueError):
        return
    open(t.out + ".stop", "w").close()
    try:
        os.kill(pid, signal.SIGTERM)  # the fake we started, by its pid
    except OSError:
        pass


def _rank(t, **env):
    base = dict(PROBING="1", PROBING_MCP_NODE=None, PROBING_MCP_BIN=t.fake, FAKE_OUT=t.out)
    base.update(env)
    r = H.run([t.rank], t.env(**base), timeout=90)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def _fake_record(t):
    with open(t.out + ".argv") as f:
        argv = f.read().splitlines()
    with open(t.out + ".env") as f:
        env = dict(kv.split("=", 1) for kv in f.read().split("\0") if "=" in kv)
    with open(t.out + ".cwd") as f:
        cwd = f.read().strip()
    with open(t.out + ".stat") as f:
        s = f.read()
    fields = s[s.rfind(")") + 2:].split()
    with open(t.out + ".pid") as f:
        pid = int(f.read())
    return {"argv": argv, "env": env, "cwd": cwd, "pgid": int(fields[2]), "sid": int(fields[3]), "pid": pid}


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return False
    return s[s.rfind(")") + 2:].split()[0] != "Z"


def _node_lines(stderr):
    return [ln for ln in stderr.splitlines() if "node daemon" in ln]


def test_core_nodestart_local_rank_0_starts_it_detached(tree):
    out, err = _rank(tree, RANK_WAIT_FAKE="1", LOCAL_RANK="0", RANK="3", WORLD_SIZE="8", GROUP_RANK="1",
                     MASTER_ADDR="head-node", MASTER_PORT="29500", TORCHELASTIC_RUN_ID="job-7",
                     PROBING_NODE_HOST="node-b", PROBING_ADVERTISE_ADDR="10.0.0.2", PROBING_LOGLEVEL="info")
    assert out["plan"]["start"] is True, out
    rec = _fake_record(tree)
    assert rec["argv"] == [tree.fake, "node", "--http", "127.0.0.1:9781", "--idle-exit", "10m"]
    for k, v in (("MASTER_ADDR", "head-node"), ("MASTER_PORT", "29500"), ("TORCHELASTIC_RUN_ID", "job-7"),
                 ("GROUP_RANK", "1"), ("PROBING_NODE_HOST", "node-b"), ("PROBING_ADVERTISE_ADDR", "10.0.0.2"),
                 ("PROBING_DATA_DIR", tree.data)):
        assert rec["env"].get(k) == v, k
    assert rec["cwd"] == "/"
    # Its own session and process group: a killpg of the rank's group
    # does not reach it.
    assert rec["sid"] != out["sid"] and rec["pgid"] != out["pgid"]
    # Not the rank's child (sh started it and was reaped): no zombie, and
    # it outlives the rank, which has exited by now.
    assert out["children"] == [], out["children"]
    assert _alive(rec["pid"])
    lines = _node_lines(err)
    assert len(lines) == 1 and "started the node daemon" in lines[0], err
    log = os.path.join(tree.data, "node-daemon.%d.log" % os.geteuid())
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600


def test_core_nodestart_token_binds_all_interfaces_and_reaches_the_daemon(tree):
    _rank(tree, RANK_WAIT_FAKE="1", LOCAL_RANK="0", PROBING_AUTH_TOKEN="s3cret", PROBING_MCP_NODE_IDLE="90s")
    rec = _fake_record(tree)
    assert rec["argv"][1:] == ["node", "--http", "0.0.0.0:9781", "--idle-exit", "90s"]
    assert rec["env"].get("PROBING_AUTH_TOKEN") == "s3cret"


@pytest.mark.parametrize("env", [
    {"LOCAL_RANK": "1", "RANK": "0"},
    {"LOCAL_RANK": "3", "RANK": "11"},
    {"RANK": "2"},
    {"LOCAL_RANK": "0", "PROBING_MCP_NODE": "off"},
    {"LOCAL_RANK": "0", "PROBING_MCP_NODE": "0"},
    {"LOCAL_RANK": "0", "PROBING_MCP_NODE": "False"},
    {"LOCAL_RANK": "0", "PROBING_MCP_NODE": "no"},
])
def test_core_nodestart_others_start_nothing(tree, env):
    out, err = _rank(tree, **env)
    assert out["plan"]["start"] is False, out["plan"]
    assert not os.path.exists(tree.out + ".argv")
    assert _node_lines(err) == []  # said at debug level only


def test_core_nodestart_without_local_rank_rank_0_or_a_single_process_starts_it(tree):
    _rank(tree, RANK_WAIT_FAKE="1", RANK="0")
    assert _fake_record(tree)["argv"][1] == "node"
    _stop_fake(tree)
    os.unlink(tree.out + ".pid")
    out, _ = _rank(tree, RANK_WAIT_FAKE="1")  # no rank variables at all
    assert out["plan"]["start"] is True and os.path.exists(tree.out + ".pid")


def test_core_nodestart_no_binary_one_line_no_crash(tree):
    beside = os.path.join(os.path.dirname(os.path.realpath(H.PYTHON)), "probing-mcp")
    if os.path.exists(beside) or os.path.exists(os.path.join(H.PKG, nodestart.RECORD_NAME)):
        pytest.skip("a probing-mcp binary is installed beside %s: the not-found case cannot be set up" % H.PYTHON)
    out, err = _rank(tree, PROBING_MCP_BIN=None, LOCAL_RANK="0", PROBING_LOGLEVEL="info")
    assert out["plan"]["start"] is False
    lines = _node_lines(err)
    assert len(lines) == 1 and "no probing-mcp binary" in lines[0] and "PROBING_MCP_BIN" in lines[0], err
    # Quiet at the default level.
    _, err = _rank(tree, PROBING_MCP_BIN=None, LOCAL_RANK="0")
    assert _node_lines(err) == [], err


def test_core_nodestart_bad_explicit_binary_one_warning(tree):
    out, err = _rank(tree, PROBING_MCP_BIN=os.path.join(tree.root, "nope"), LOCAL_RANK="0")
    lines = _node_lines(err)
    assert len(lines) == 1 and "WARNING" in lines[0] and "PROBING_MCP_BIN" in lines[0], err


def test_core_nodestart_failing_daemon_does_not_disturb_the_rank(tree):
    # The fake exits 1 at once (as a daemon refusing its flags would).
    out, err = _rank(tree, RANK_WAIT_FAKE="1", LOCAL_RANK="0", FAKE_EXIT="1")
    assert os.path.exists(tree.out + ".pid") and out["children"] == []


def test_core_nodestart_without_sh_the_reaper_thread_waits(tree):
    # No /bin/sh: the daemon is the rank's child; it exits at once here, and
    # without the reaper it would stay a zombie child of the rank.
    out, err = _rank(tree, PROBING=None, RANK_MANUAL=os.path.join(tree.root, "no-sh"), RANK_WAIT_FAKE="1",
                     LOCAL_RANK="0", FAKE_EXIT="0", PROBING_LOGLEVEL="info")
    assert os.path.exists(tree.out + ".pid")
    assert out["children"] == [], out["children"]
    assert "a daemon thread reaps it" in err, err


def test_core_nodestart_start_does_not_wait_for_the_daemon(tree):
    # start() returns before the spawn: the thread does it. A fake whose
    # start would hang must not hold the caller.
    env = dict(os.environ, LOCAL_RANK="0", PROBING_MCP_BIN=tree.fake, FAKE_OUT=tree.out)
    env.pop("PROBING_MCP_NODE", None)
    calls = []
    orig = nodestart.spawn

    def slow_spawn(argv, environ=None):
        calls.append(argv)
        time.sleep(3600)

    nodestart.spawn = slow_spawn
    try:
        nodestart.start(env)  # returns: the hung spawn is in a daemon thread
    finally:
        deadline = time.time() + 30
        while not calls and time.time() < deadline:
            time.sleep(0.01)
        nodestart.spawn = orig
    assert calls and calls[0][0] == tree.fake


def test_core_nodestart_never_raises():
    class Boom(dict):
        def get(self, *a):
            raise RuntimeError("boom")

    nodestart.start(Boom())  # logged, not raised


# ---- the rules, in-process ----------------------------------------------

def _plan(env, executable="/nonexistent/python", pkg_dir="/nonexistent"):
    return nodestart.plan(env, executable=executable, pkg_dir=pkg_dir)


def test_core_nodestart_address_rules(tmp_path):
    fake = tmp_path / "probing-mcp"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    b = {"PROBING_MCP_BIN": str(fake)}

    def argv(**env):
        p = _plan(dict(b, **env))
        assert p["start"], p
        return p["argv"][1:]

    assert argv() == ["node", "--http", "127.0.0.1:9781", "--idle-exit", "10m"]
    assert argv(PROBING_AUTH_TOKEN="t")[2] == "0.0.0.0:9781"
    assert argv(PROBING_AUTH_TOKEN="")[2] == "127.0.0.1:9781"  # an empty token is none
    assert argv(PROBING_MCP_NODE_PORT="9999")[2] == "127.0.0.1:9999"
    assert argv(PROBING_MCP_NODE_PORT=" 80 ", PROBING_AUTH_TOKEN="t")[2] == "0.0.0.0:80"
    assert argv(PROBING_MCP_NODE_ADDR="10.1.2.3:7000", PROBING_MCP_NODE_PORT="1")[2] == "10.1.2.3:7000"
    assert argv(PROBING_MCP_NODE_IDLE="1h30m")[4] == "1h30m"
    assert argv(PROBING_MCP_NODE_IDLE="0")[4] == "0"
    for bad in ("0", "65536", "-1", "http", "99999999999"):
        p = _plan(dict(b, PROBING_MCP_NODE_PORT=bad))
        assert not p["start"] and p["level"] == "warning" and "PROBING_MCP_NODE_PORT" in p["why"], p
    for bad in ("10", "ten minutes", "5x", "m"):
        p = _plan(dict(b, PROBING_MCP_NODE_IDLE=bad))
        assert not p["start"] and "PROBING_MCP_NODE_IDLE" in p["why"], p
    p = _plan(dict(b, PROBING_MCP_NODE_IDLE="x" * 10000))
    assert len(p["why"]) < 400  # the value is clipped in the message


def test_core_nodestart_leader_rules():
    assert nodestart.leader({})[0] is True
    assert nodestart.leader({"LOCAL_RANK": "0", "RANK": "5"})[0] is True
    assert nodestart.leader({"LOCAL_RANK": "2", "RANK": "0"})[0] is False
    assert nodestart.leader({"RANK": "0"})[0] is True
    assert nodestart.leader({"RANK": "1"})[0] is False
    assert nodestart.leader({"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_RANK": "4"})[0] is True
    assert nodestart.leader({"SLURM_LOCALID": "1", "SLURM_PROCID": "0"})[0] is False
    assert nodestart.leader({"LOCAL_RANK": "junk", "RANK": "0"})[0] is True  # unreadable: as if absent
    for v in ("on", "1", "yes", "", "anything"):
        assert not nodestart.switched_off({"PROBING_MCP_NODE": v}), v
    for v in ("off", "0", "FALSE", " no "):
        assert nodestart.switched_off({"PROBING_MCP_NODE": v}), v


def test_core_nodestart_binary_lookup(tmp_path):
    def exe(p):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("#!/bin/sh\n")
        p.chmod(0o755)
        return str(p)

    pkg = tmp_path / "site" / "probing_mcp_agent"
    pkg.mkdir(parents=True)
    venv_py = tmp_path / "venv" / "bin" / "python"
    # Nothing anywhere: info, naming what was looked at.
    path, miss = nodestart.find_binary({}, str(venv_py), str(pkg))
    assert path is None and miss[0] == "info"
    assert "PROBING_MCP_BIN unset" in miss[1] and "no install record" in miss[1] and str(venv_py.parent) in miss[1]
    # Beside the interpreter.
    beside = exe(tmp_path / "venv" / "bin" / "probing-mcp")
    assert nodestart.find_binary({}, str(venv_py), str(pkg))[0] == beside
    # The install record wins over beside the interpreter.
    placed = exe(tmp_path / "local" / "bin" / "probing-mcp")
    (pkg / "node_bin.json").write_text(json.dumps({"path": placed, "ours": True}))
    assert nodestart.find_binary({}, str(venv_py), str(pkg))[0] == placed
    # PROBING_MCP_BIN wins over both; a name is looked up on PATH.
    explicit = exe(tmp_path / "mine" / "probing-mcp")
    assert nodestart.find_binary({"PROBING_MCP_BIN": explicit}, str(venv_py), str(pkg))[0] == explicit
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = str(tmp_path / "mine") + os.pathsep + old
    try:
        assert nodestart.find_binary({"PROBING_MCP_BIN": "probing-mcp"}, "", str(pkg))[0] == explicit
    finally:
        os.environ["PATH"] = old
    # An explicit one that is not there is not silently replaced.
    path, miss = nodestart.find_binary({"PROBING_MCP_BIN": str(tmp_path / "gone")}, str(venv_py), str(pkg))
    assert path is None and miss[0] == "warning"
    # A broken or stale record falls through to beside the interpreter.
    for bad in ("{", json.dumps({"path": "relative/probing-mcp"}), json.dumps({"path": str(tmp_path / "gone")}),
                json.dumps([1]), "x" * (70 << 10)):
        (pkg / "node_bin.json").write_text(bad)
        assert nodestart.find_binary({}, str(venv_py), str(pkg))[0] == beside, bad
    # The pip-installed wheel's binary, in the sibling package, comes
    # before beside the interpreter (where pip put only the launcher).
    wheel = exe(tmp_path / "site" / "probing_mcp" / "bin" / "probing-mcp")
    assert nodestart.find_binary({}, str(venv_py), str(pkg))[0] == wheel
    os.chmod(wheel, 0o644)
    path, _ = nodestart.find_binary({}, str(venv_py), str(pkg))
    assert path == beside
    # A file that is not executable is not a binary.
    os.chmod(beside, 0o644)
    path, miss = nodestart.find_binary({}, str(venv_py), str(pkg))
    assert path is None and "no wheel binary at " + wheel in miss[1]


def test_core_nodestart_log_is_ours_and_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(nodestart, "log_path", lambda: str(tmp_path / "node-daemon.log"))
    fd, path = nodestart._open_log()
    os.write(fd, b"x" * (nodestart.LOG_MAX + 1))
    os.close(fd)
    fd, path = nodestart._open_log()
    try:
        assert os.fstat(fd).st_size == 0  # emptied past the bound
    finally:
        os.close(fd)
    os.unlink(path)
    os.symlink(str(tmp_path / "elsewhere"), path)
    assert nodestart._open_log() == (None, "")  # a symlink in its place is refused
    assert not os.path.exists(str(tmp_path / "elsewhere"))


def test_core_nodestart_exit_waits_for_the_spawn(monkeypatch):
    """The process's exit waits (a bounded while) for a start thread still
    spawning: the interpreter is not finalized under a thread inside
    subprocess's fork and exec."""
    import atexit
    import threading

    done = threading.Event()
    registered = []

    def slow_run(env):
        time.sleep(0.3)
        done.set()

    monkeypatch.setattr(nodestart, "_run", slow_run)
    monkeypatch.setattr(nodestart, "switched_off", lambda env: False)
    monkeypatch.setattr(nodestart, "leader", lambda env: (True, "test"))
    monkeypatch.setattr(atexit, "register", lambda f, *a: registered.append((f, a)))
    nodestart.start({})
    assert len(registered) == 1 and not done.is_set()
    f, a = registered[0]
    f(*a)  # what the interpreter runs at exit
    assert done.is_set()
