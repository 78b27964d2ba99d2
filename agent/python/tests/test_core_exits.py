"""A dead rank's cause survives it (exits.py): uncaught exceptions, the main
thread dying while non-daemon threads live on, the exit, SIGTERM/SIGINT; and
each rank's own Flight Recorder prefixes under PROBING=2. Real child
processes, read after they died."""
import json
import os
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import core_helpers as H  # noqa: E402


@pytest.fixture()
def tree():
    t = H.Env()
    yield t
    t.cleanup()


def records(tree, pid):
    path = os.path.join(tree.data, str(pid), ".exceptions.jsonl")
    with open(path) as f:
        return [json.loads(line) for line in f]


def wait_record(tree, pid, kind, timeout=20):
    """Waits for a record of that kind to appear (a state, not a delay)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            got = [r for r in records(tree, pid) if r["kind"] == kind]
        except (OSError, ValueError):
            got = []
        if got:
            return got[0]
        time.sleep(0.02)
    raise AssertionError("no %s record for pid %d" % (kind, pid))


MAIN_RAISES = r'''
import os
print(os.getpid(), flush=True)
def inner():
    raise ValueError("boom " + "x" * 10000)
def outer():
    try:
        {}["k"]
    except KeyError:
        inner()
outer()
'''


def test_exits_main_thread_exception_and_exit_code(tree):
    script = tree.write("main_raises.py", MAIN_RAISES)
    r = H.run([script], tree.env(PROBING="1"))
    assert r.returncode == 1
    assert "ValueError: boom" in r.stderr  # the previous hook still printed it
    pid = int(r.stdout.split()[0])
    recs = records(tree, pid)
    assert [x["kind"] for x in recs] == ["exception", "exit"], recs
    exc, ex = recs
    assert exc["hook"] == "sys.excepthook" and exc["type"] == "ValueError" and exc["pid"] == pid
    assert exc["start_time"] == tree.identity(pid)["start_time"] > 0
    assert exc["thread"]["is_main"] and exc["thread"]["name"] == "MainThread" and exc["thread"]["native_id"] > 0
    assert len(exc["message"]) == 4096 and exc["message"].startswith("boom x") and exc["message_truncated"]
    assert [f["function"] for f in exc["frames"]] == ["inner", "outer", "<module>"]  # innermost first
    assert exc["frames"][0]["file"] == script and exc["frames"][0]["line"] == 5
    assert exc["chain"] == [{"relation": "context", "type": "KeyError", "message": "'k'",
                             "message_truncated": False}]
    assert abs(exc["time_ns"] / 1e9 - time.time()) < 3600
    assert ex["code"] == 1 and ex["code_source"] == "uncaught_exception" and ex["signal"] is None
    st = os.stat(os.path.join(tree.data, str(pid), ".exceptions.jsonl"))
    assert st.st_mode & 0o777 == 0o644
    # sys.exit(3): the exit record has the code; nothing else is recorded.
    r = H.run(["-c", "import os, sys; print(os.getpid(), flush=True); sys.exit(3)"], tree.env(PROBING="1"))
    assert r.returncode == 3
    recs = records(tree, int(r.stdout.split()[0]))
    assert len(recs) == 1 and recs[0]["kind"] == "exit" and recs[0]["code"] == 3
    assert recs[0]["code_source"] == "sys.exit"


WORKER_RAISES = r'''
import sys, threading
def work():
    raise KeyError("lost shard 7")
t = threading.Thread(target=work, name="worker-7")
t.start()
t.join()
print("JOINED", flush=True)
sys.stdin.read()
'''


def test_exits_worker_thread_exception_survives_kill9(tree):
    script = tree.write("worker_raises.py", WORKER_RAISES)
    p = H.spawn([script], tree.env(PROBING="1"))
    try:
        H.readline(p, want="JOINED")
        p.kill()  # SIGKILL right after: no atexit, no flush, nothing
        p.wait(10)
        assert p.returncode == -signal.SIGKILL
        assert "Exception in thread worker-7" in p.stderr.read()
    finally:
        H.stop(p)
    recs = records(tree, p.pid)
    assert len(recs) == 1, recs
    exc = recs[0]
    assert exc["kind"] == "exception" and exc["hook"] == "threading.excepthook" and exc["type"] == "KeyError"
    assert exc["message"] == "'lost shard 7'"
    assert exc["thread"]["name"] == "worker-7" and not exc["thread"]["is_main"] and exc["thread"]["native_id"] > 0
    assert exc["frames"][0]["function"] == "work" and exc["frames"][0]["file"] == script


MAIN_DIES_KEEPER_LIVES = r'''
import os, sys, threading
def keep():
    sys.stdin.read()
threading.Thread(target=keep, name="keeper").start()
print(os.getpid(), flush=True)
raise RuntimeError("main thread gave up")
'''


def test_exits_main_thread_dead_non_daemon_alive(tree):
    script = tree.write("keeper.py", MAIN_DIES_KEEPER_LIVES)
    p = H.spawn([script], tree.env(PROBING="1"))
    try:
        pid = int(H.readline(p))
        rec = wait_record(tree, pid, "main_thread_exit")
        assert p.poll() is None  # the process lives on, in threading._shutdown
        assert rec["outcome"] == "exception"
        assert rec["exception"] == {"type": "RuntimeError", "message": "main thread gave up"}
        assert [t["name"] for t in rec["threads_alive"]] == ["keeper"] and rec["threads_alive_total"] == 1
        assert rec["threads_alive"][0]["daemon"] is False
        p.stdin.close()
        p.wait(15)
        assert p.returncode == 1
    finally:
        H.stop(p)
    kinds = [r["kind"] for r in records(tree, pid)]
    assert kinds == ["exception", "main_thread_exit", "exit"], kinds
    assert records(tree, pid)[-1]["code"] == 1


def test_exits_sigterm_recorded_and_kills_by_signal(tree):
    # Without the agent: SIGTERM kills by the signal. With it: the same, and
    # the stacks at that moment are in .signal.SIGTERM.txt.
    for probing in ("0", "1"):
        p = H.spawn([tree.write("idle.py", H.IDLE_CHILD)], tree.env(PROBING=probing))
        try:
            H.readline(p, want="UP")
            if probing == "1":
                H.wait_path(tree.sock(p.pid))
                while H.get(tree.sock(p.pid), "/ready").status != 200:
                    time.sleep(0.02)
            p.send_signal(signal.SIGTERM)
            p.wait(15)
            assert p.returncode == -signal.SIGTERM, (probing, p.stderr.read())
        finally:
            H.stop(p)
    d = os.path.join(tree.data, str(p.pid))
    text = open(os.path.join(d, ".signal.SIGTERM.txt")).read()
    assert "most recent call first" in text and "idle.py" in text
    assert tree.identity(p.pid)["signal_files"]["SIGTERM"] == os.path.join(d, ".signal.SIGTERM.txt")
    assert not [r for r in records(tree, p.pid) if r["kind"] == "exit"]  # killed: no atexit


def test_exits_sigint_keeps_keyboard_interrupt(tree):
    # Python's SIGINT handler still runs (KeyboardInterrupt), and Python still
    # ends by SIGINT afterwards, as without the agent.
    p, sock = H.spawn_agent(tree)
    try:
        p.send_signal(signal.SIGINT)
        p.wait(15)
        err = p.stderr.read()
        assert p.returncode == -signal.SIGINT and "KeyboardInterrupt" in err, err
    finally:
        H.stop(p)
    assert os.path.getsize(os.path.join(tree.data, str(p.pid), ".signal.SIGINT.txt")) > 0
    recs = records(tree, p.pid)
    assert [r["kind"] for r in recs] == ["exception", "exit"] and recs[0]["type"] == "KeyboardInterrupt"
    assert recs[1]["signal"] == signal.SIGINT and recs[1]["code"] is None
    assert recs[1]["signals_received"] == ["SIGINT"]


LAUNCHER = r'''
import json, os, subprocess, sys
child = "import json, os; print(json.dumps({'pid': os.getpid(), 'env': dict((k, v) for k, v in os.environ.items() " \
        "if k.startswith(('TORCH_', 'PROBING_MCP_FR')))}))"
r = subprocess.run([sys.executable, "-c", child], stdout=subprocess.PIPE, universal_newlines=True, check=True)
print(json.dumps({"pid": os.getpid(), "child": json.loads(r.stdout)}))
'''


def test_fr_prefixes_per_rank_under_probing2(tree):
    script = tree.write("launcher.py", LAUNCHER)
    r = H.run([script], tree.env(PROBING="2"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for pid in (out["pid"], out["child"]["pid"]):
        ident = tree.identity(pid)
        d = os.path.join(tree.data, str(pid))
        assert ident["fr_dump_prefix"] == os.path.join(d, "fr_dump_rank_"), (pid, ident)
        assert ident["fr_pipe_prefix"] == os.path.join(d, "fr_pipe_"), (pid, ident)
    cenv = out["child"]["env"]
    assert cenv["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] == os.path.join(tree.data, str(out["child"]["pid"]), "fr_pipe_")
    assert cenv["PROBING_MCP_FR_DEFAULTS"].startswith("%d:" % out["child"]["pid"])
    # A value the user set is kept in every rank; the rest is still per rank.
    r = H.run([script], tree.env(PROBING="2", TORCH_FR_DUMP_TEMP_FILE="/x/user_dump_"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for pid in (out["pid"], out["child"]["pid"]):
        ident = tree.identity(pid)
        assert ident["fr_dump_prefix"] == "/x/user_dump_"
        assert ident["fr_pipe_prefix"] == os.path.join(tree.data, str(pid), "fr_pipe_")


OWN_HANDLER = r'''
import os, signal, sys
def on_term(n, f):
    sys.exit(7)
signal.signal(signal.SIGTERM, on_term)
print("UP", flush=True)
sys.stdin.read()
'''


def test_exits_program_sigterm_handler_still_decides(tree):
    # The program's own handler (set after the agent) runs as without the
    # agent; the exit record has the code it chose.
    p = H.spawn([tree.write("own_handler.py", OWN_HANDLER)], tree.env(PROBING="1"))
    try:
        H.readline(p, want="UP")
        p.send_signal(signal.SIGTERM)
        p.wait(15)
        assert p.returncode == 7, p.stderr.read()
    finally:
        H.stop(p)
    recs = records(tree, p.pid)
    assert [r["kind"] for r in recs] == ["exit"] and recs[0]["code"] == 7 and recs[0]["code_source"] == "sys.exit"


STORM = r'''
import os, threading
print(os.getpid(), flush=True)
def work(i):
    raise ValueError("e%d " % i + "y" * 8000)
for i in range(300):
    t = threading.Thread(target=work, args=(i,), name="w%d" % i)
    t.start()
    t.join()
'''


def test_exits_bounded_under_an_exception_storm(tree):
    r = H.run([tree.write("storm.py", STORM)], tree.env(PROBING="1"), timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    pid = int(r.stdout.split()[0])
    recs = records(tree, pid)
    assert len([x for x in recs if x["kind"] == "exception"]) == 256
    assert recs[-1]["kind"] == "exit" and recs[-1]["exceptions_dropped"] == 44
    assert recs[-1]["exceptions_recorded"] == 256
    assert os.path.getsize(os.path.join(tree.data, str(pid), ".exceptions.jsonl")) < 4 << 20


FORKS = r'''
import os, signal, sys, time
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, b"x")  # the at-fork hooks have run
    time.sleep(600)
    os._exit(0)
os.read(r, 1)
os.kill(pid, signal.SIGTERM)
_, status = os.waitpid(pid, 0)
print(os.getpid(), os.WIFSIGNALED(status) and os.WTERMSIG(status), flush=True)
'''


def test_exits_forked_child_writes_nothing_into_the_parents_files(tree):
    r = H.run([tree.write("forks.py", FORKS)], tree.env(PROBING="1"))
    assert r.returncode == 0, r.stderr
    pid, sig = [int(x) for x in r.stdout.split()]
    assert sig == signal.SIGTERM
    assert not os.path.exists(os.path.join(tree.data, str(pid), ".signal.SIGTERM.txt"))  # empty, removed
    assert [x["kind"] for x in records(tree, pid)] == ["exit"]


def test_exits_sigterm_never_turns_into_a_crash(tree):
    # The signal file holds the receiving thread's stack only: dumping every
    # thread while the server threads ran crashed ~3% of tries (SIGSEGV
    # instead of SIGTERM, and a false crash file). Each try must end by SIGTERM.
    for _ in range(25):
        p, sock = H.spawn_agent(tree)
        try:
            p.send_signal(signal.SIGTERM)
            p.wait(15)
            assert p.returncode == -signal.SIGTERM, p.stderr.read()
        finally:
            H.stop(p)
        crash = os.path.join(tree.data, "crash", str(p.pid), "faulthandler.txt")
        assert not os.path.exists(crash) or os.path.getsize(crash) == 0  # killed: left empty, no crash
