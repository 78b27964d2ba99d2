"""Agent behaviour that needs its own process: faulthandler with the GIL held,
stale sockets, TCP and its auth, crash files, torch.distributed identity,
fork, Python 3.9."""
import ast
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
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


GIL_CHILD = r'''
import ctypes, os, sys, threading, time

def worker_loop():
    while True:
        time.sleep(0.01)

threading.Thread(target=worker_loop, name="busy-worker", daemon=True).start()
libc = ctypes.PyDLL(None)  # PyDLL: foreign calls keep the GIL
rfd, wfd = os.pipe()       # nobody ever writes: read() blocks for good
buf = ctypes.create_string_buffer(1)

def hold_gil_forever():
    print("HOLDING %d" % os.getpid(), flush=True)
    # read() is restarted after faulthandler's handler (SA_RESTART), so the
    # main thread never comes back to Python, and never drops the GIL.
    libc.read(rfd, buf, 1)
    print("RETURNED", flush=True)

hold_gil_forever()
'''


_READ_SYSCALL = {"x86_64": 0, "aarch64": 63, "ppc64le": 3, "s390x": 3}


def _wait_in_read(pid, guard=30):
    """Waits until the main thread of pid is blocked in read(2) (holding the
    GIL), from /proc/<pid>/syscall; where its number is unknown, until the
    thread sleeps. A hang guard, not a margin."""
    nr = _READ_SYSCALL.get(os.uname().machine)
    deadline = time.time() + guard
    while time.time() < deadline:
        try:
            if nr is not None:
                with open("/proc/%d/syscall" % pid) as f:
                    if f.read().split()[0] == str(nr):
                        return
            else:
                with open("/proc/%d/stat" % pid, "rb") as f:
                    d = f.read()
                if d[d.rindex(b")") + 2:].split()[0] == b"S":
                    return
        except (OSError, IndexError):
            pass
        time.sleep(0.01)
    raise AssertionError("pid %d never blocked in read()" % pid)


def test_core_faulthandler_dump_while_gil_held(tree):
    script = tree.write("gil_holder.py", GIL_CHILD)
    p = H.spawn([script], tree.env(PROBING="1"))
    try:
        pid = int(H.readline(p, want="HOLDING").split()[1])
        sock = H.wait_path(tree.sock(pid))
        _wait_in_read(pid)
        # The main thread holds the GIL inside sleep(): Python code (the HTTP
        # server included) cannot run, though the kernel accepts connections.
        with pytest.raises(socket.timeout):
            H.get(sock, "/health", timeout=1.0)
        ident = tree.identity(pid)
        sig = ident["faulthandler_signal"]
        assert sig > 0
        with open("/proc/%d/stat" % pid, "rb") as f:
            d = f.read()
        assert int(d[d.rindex(b")") + 2:].split()[19]) == ident["start_time"]
        os.kill(pid, sig)
        path = ident["faulthandler_file"]
        deadline = time.time() + 30  # a hang guard
        text = ""
        while time.time() < deadline:
            with open(path) as f:
                text = f.read()
            if "hold_gil_forever" in text and "worker_loop" in text:
                break
            time.sleep(0.05)
        assert "hold_gil_forever" in text and "worker_loop" in text, text
        assert text.count("Thread 0x") + text.count("Current thread 0x") >= 3  # main, worker, server
        # The control socket's thread: serving, or waiting for its first client.
        assert "serve_forever" in text or "/probing_mcp_agent/ctrl.py" in text, text
        assert p.poll() is None  # the signal did not kill it
        os.kill(pid, sig)  # appended, not overwritten
        deadline = time.time() + 30
        while time.time() < deadline and open(path).read().count("hold_gil_forever") < 2:
            time.sleep(0.05)
        assert open(path).read().count("hold_gil_forever") == 2
    finally:
        H.stop(p)


STALE_CHILD = r'''
import os, socket, sys
root = os.environ["PROBING_CTRL_ROOT"]
os.makedirs(root, exist_ok=True)
path = os.path.join(root, "%d.sock" % os.getpid())
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)          # a socket file nobody listens on: what a dead process
s.close()             # with our pid (reused) would have left
print("STALE", os.path.exists(path), flush=True)
import probing_mcp_agent._hook  # activation, as the .pth does
print("UP %d" % os.getpid(), flush=True)
sys.stdin.read()
'''


def test_core_stale_socket_replaced_and_eval_opt_out(tree):
    script = tree.write("stale.py", STALE_CHILD)
    env = tree.env(PROBING="1", PROBING_SERVER_ADDR="0.0.0.0:0", PROBING_STACK_SIGNAL="12",
                   PROBING_LOGLEVEL="info", PROBING_ALLOW_EVAL="off")
    env["PYTHONPATH"] = H.AGENT_PY  # no site hook: the script imports it itself
    p = H.spawn([script], env)
    try:
        assert H.readline(p, want="STALE") == "STALE True"
        pid = int(H.readline(p, want="UP").split()[1])
        sock = tree.sock(pid)
        assert H.get(sock, "/health").json() == {"status": "ok"}
        r = H.request(sock, "POST", "/apis/pythonext/eval", "1+1")
        assert r.status == 403 and r.json()["error"]["code"] == "FORBIDDEN"
        assert "PROBING_ALLOW_EVAL" in r.json()["error"]["message"]
        ident = tree.identity(pid)
        assert ident["eval_allowed"] is False
        assert ident["faulthandler_signal"] == 12
        # A TCP bind without a token is refused.
        assert ident["addr"] == ""
        assert H.get(sock, "/config/server.address").text == ""
    finally:
        p.stdin.close()
        p.wait(10)
        err = p.stderr.read()
        H.stop(p)
    assert "refusing to listen on 0.0.0.0:0 without PROBING_AUTH_TOKEN" in err
    assert "removed the stale control socket" in err


TCP_CHILD = "import sys\nprint('UP', flush=True)\nsys.stdin.read()\n"


def _tcp_child(tree, **env):
    script = tree.write("tcp_child.py", TCP_CHILD)
    p = H.spawn([script], tree.env(PROBING="1", PROBING_ALLOW_EVAL="1", **env))
    H.readline(p, want="UP")
    pid = p.pid
    H.wait_path(tree.sock(pid))
    ident = tree.identity(pid)
    return p, pid, ident


def test_core_tcp_token_auth(tree):
    p, pid, ident = _tcp_child(tree, PROBING_PORT="RANDOM", PROBING_AUTH_TOKEN="s3cr3t",
                               PROBING_AUTH_USERNAME="ops")
    try:
        host, port = ident["addr"].rsplit(":", 1)
        assert host == "0.0.0.0"
        t = ("127.0.0.1", int(port))
        assert H.get(tree.sock(pid), "/config/server.address").text == ident["addr"]
        assert H.get(t, "/health").status == 200 and H.get(t, "/ready").status == 200
        r = H.get(t, "/apis/identity")
        assert r.status == 401
        assert r.headers["WWW-Authenticate"] == 'Basic realm="Probe Server"'
        assert r.json()["error"]["code"] == "UNAUTHORIZED"
        assert r.json()["error"]["action"]
        assert H.get(t, "/apis/identity", headers={"Authorization": "Bearer wrong"}).status == 401
        basic = "Basic " + base64.b64encode(b"ops:s3cr3t").decode()
        bad_user = "Basic " + base64.b64encode(b"admin:s3cr3t").decode()
        for h in ({"Authorization": "Bearer s3cr3t"}, {"Authorization": basic}, {"X-Probing-Token": "s3cr3t"}):
            assert H.get(t, "/apis/identity", headers=h).json()["pid"] == pid
        assert H.get(t, "/apis/identity", headers={"Authorization": bad_user}).status == 401
        r = H.request(t, "POST", "/apis/pythonext/eval", "6*7", headers={"Authorization": "Bearer s3cr3t"})
        assert r.status == 200 and r.json()["output"] == "42\n"
        assert "s3cr3t" not in H.get(tree.sock(pid), "/config").text
        assert "s3cr3t" not in json.dumps(tree.identity(pid))
    finally:
        H.stop(p)


def test_core_crash_backtrace_file(tree):
    code = "import faulthandler, os\nprint(os.getpid(), flush=True)\nfaulthandler._sigsegv()\n"
    r = H.run(["-c", code], tree.env(PROBING="1"))
    pid = int(r.stdout.split()[0])
    assert r.returncode == -signal.SIGSEGV
    path = os.path.join(tree.data, "crash", str(pid), "faulthandler.txt")
    text = open(path).read()
    assert "Segmentation fault" in text and "<module>" in text
    # The program enables faulthandler to stderr after the agent did (as
    # torchelastic's @record does in every rank): the stack it dies with
    # still reaches the crash file; a file of its own choosing is obeyed.
    code2 = ("import faulthandler, os, sys\nprint(os.getpid(), flush=True)\nfaulthandler.enable(all_threads=True)\n"
             "faulthandler.enable(sys.stderr)\nos.abort()\n")
    r = H.run(["-c", code2], tree.env(PROBING="1"))
    pid = int(r.stdout.split()[0])
    assert r.returncode == -signal.SIGABRT
    text = open(os.path.join(tree.data, "crash", str(pid), "faulthandler.txt")).read()
    assert "Aborted" in text and "<module>" in text, (text, r.stderr)
    own = os.path.join(tree.root, "own-crash.txt")
    code3 = ("import faulthandler, os\nprint(os.getpid(), flush=True)\nf = open(%r, 'w')\n"
             "faulthandler.enable(f)\nos.abort()\n" % own)
    r = H.run(["-c", code3], tree.env(PROBING="1"))
    assert "Aborted" in open(own).read()
    # Off: no crash file; a clean exit leaves no empty crash file either.
    r = H.run(["-c", code], tree.env(PROBING="1", PROBING_CRASH_BACKTRACE="off"))
    pid = int(r.stdout.split()[0])
    assert not os.path.exists(os.path.join(tree.data, "crash", str(pid)))
    r = H.run(["-c", "import os; print(os.getpid())"], tree.env(PROBING="1"))
    pid = int(r.stdout.split()[0])
    assert not os.path.exists(os.path.join(tree.data, "crash", str(pid)))


FAKE_TORCH = {
    "torch/__init__.py": "__version__ = '9.9.9+fake'\n",
    "torch/distributed/__init__.py": (
        "_init = False\n"
        "def is_available():\n    return True\n"
        "def is_initialized():\n    return _init\n"
        "def init_process_group(*a, **k):\n    global _init\n    _init = True\n"
        "def get_rank():\n    return 5\n"
        "def get_world_size():\n    return 6\n"),
}

DIST_CHILD = r'''
import json, os, sys, time
idp = os.path.join(os.environ["PROBING_DATA_DIR"], str(os.getpid()), ".identity.json")
before = json.load(open(idp))
import torch.distributed as dist
dist.init_process_group("gloo")
deadline = time.time() + 60  # a hang guard: the watcher polls every 2 s
while time.time() < deadline:
    after = json.load(open(idp))
    if after["rank"] == 5:
        break
    time.sleep(0.05)
print(json.dumps([before, after]))
'''


def test_core_identity_follows_torch_distributed(tree):
    for rel, text in FAKE_TORCH.items():
        tree.write("fake/" + rel, text)
    script = tree.write("dist_child.py", DIST_CHILD)
    env = tree.env(PROBING="1")
    env["PYTHONPATH"] += os.pathsep + os.path.join(tree.root, "fake")
    r = H.run([script], env, timeout=120)
    assert r.returncode == 0, r.stderr
    before, after = json.loads(r.stdout.strip().splitlines()[-1])
    assert before["rank"] == -1 and before["torch"] == ""
    assert after["rank"] == 5 and after["world_size"] == 6 and after["torch"] == "9.9.9+fake"
    assert after["rank_source"] == "torch.distributed"


FORK_CHILD = r'''
import json, os, sys
from probing_mcp_agent import runtime
pid = os.fork()
if pid == 0:
    os.write(1, (json.dumps({"child_active": runtime.started()}) + "\n").encode())
    os._exit(0)
os.waitpid(pid, 0)
print(json.dumps({"parent_active": runtime.started()}), flush=True)
'''


def test_core_fork_child_is_not_an_agent(tree):
    script = tree.write("fork_child.py", FORK_CHILD)
    r = H.run([script], tree.env(PROBING="1"))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.strip().splitlines()]
    assert {"child_active": False} in lines and {"parent_active": True} in lines


OWN = ["__init__.py", "_hook.py", "activation.py", "runtime.py", "config.py", "server.py", "stacks.py",
       "evaluator.py", "identity.py", "envfilter.py", "tcphost.py", "exits.py", "ctrl.py", "frenv.py"]


def test_core_sources_are_python39(tree):
    for name in OWN:
        path = os.path.join(H.PKG, name)
        with open(path) as f:
            src = f.read()
        ast.parse(src, path, feature_version=(3, 9))
        for bad in ("removeprefix", "removesuffix", "strict=True", "from typing import TypeAlias"):
            assert bad not in src, (name, bad)


def _python39():
    for c in (os.path.expanduser("~/.pyenv/versions/3.9.18/bin/python"), shutil.which("python3.9")):
        if c and os.path.exists(c):
            try:
                out = subprocess.check_output([c, "-c", "import sys; print(sys.version_info[:2] == (3, 9))"],
                                              universal_newlines=True, timeout=20)
            except Exception:
                continue
            if out.strip() == "True":
                return c
    return None


def test_core_python39_smoke(tree):
    """Activation, socket, identity, stacks, config and eval under 3.9 itself."""
    py = _python39()
    if py is None:
        pytest.skip("no Python 3.9 interpreter here")
    code = r'''
import json, os, socket, sys, threading
import http.client
from probing_mcp_agent import runtime
assert runtime.started(), "not active"
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.settimeout(5); self.sock.connect(runtime.state.socket_path)
def call(m, p, b=None):
    c = C("a"); c.request(m, p, body=b); r = c.getresponse(); d = r.read(); c.close(); return r.status, d
out = {}
out["health"] = json.loads(call("GET", "/health")[1])
out["ident"] = json.loads(call("GET", "/apis/identity")[1])
out["stacks"] = len(json.loads(call("GET", "/apis/stacks")[1])["threads"])
out["cs"] = [f["PyFrame"]["func"] for f in json.loads(call("GET", "/apis/pythonext/callstack")[1])]
out["put"] = json.loads(call("PUT", "/config/loglevel", b"debug")[1])
out["eval"] = json.loads(call("POST", "/apis/pythonext/eval", b"x = 3\nx * 3")[1])
out["pid"] = os.getpid()
print(json.dumps(out))
'''
    env = tree.env(PROBING="1", PROBING_ALLOW_EVAL="1")
    r = subprocess.run([py, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=30)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["health"] == {"status": "ok"}
    assert out["ident"]["python"].startswith("3.9.") and out["ident"]["pid"] == out["pid"]
    assert out["stacks"] >= 2 and out["cs"][-2:] == ["call", "<module>"]  # main thread: in call()
    assert out["put"]["value"] == "debug"
    assert out["eval"]["output"] == "9\n" and out["eval"]["status"] == "ok"
    for name in OWN:  # compiled to a temp file: nothing written into the tree
        subprocess.check_call([py, "-c", "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], "
                               "doraise=True)", os.path.join(H.PKG, name), os.path.join(tree.root, name + "c")])


UMASK_CHILD = r'''
import os, sys, time
print("UP %d" % os.getpid(), flush=True)
time.sleep(60)
'''


def test_core_files_not_writable_by_others_whatever_the_umask(tree):
    """The server believes the agent's files only when no one but their
    owner can have written them: a umask of 0 must not make them so."""
    script = tree.write("umask0.py", UMASK_CHILD)
    p = H.spawn([script], tree.env(PROBING="1"), preexec_fn=lambda: os.umask(0))
    try:
        pid = int(H.readline(p, want="UP").split()[1])
        d = os.path.join(tree.data, str(pid))
        H.wait_path(os.path.join(d, ".identity.json"))
        H.wait_path(os.path.join(d, ".stacks.txt"))
        for name in (".identity.json", ".stacks.txt"):
            mode = os.stat(os.path.join(d, name)).st_mode & 0o777
            assert mode & 0o022 == 0, "%s is mode %o" % (name, mode)
        assert os.stat(d).st_mode & 0o022 == 0
    finally:
        H.stop(p)
