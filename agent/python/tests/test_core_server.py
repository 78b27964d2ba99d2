"""The control server of one live, activated child process (real socket)."""
import json
import os
import signal
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import core_helpers as H  # noqa: E402

CHILD = r'''
import os, sys, threading, time
threading.stack_size(64 << 20)
sys.setrecursionlimit(20000)
ready = threading.Event()

def deep(n):
    if n == 0:
        ready.set()
        time.sleep(3600)
    return deep(n - 1)

def locals_holder():
    answer = 42
    text = "hello"
    items = [1, 2, 3]
    blob = b"xyz"
    time.sleep(3600)

def ticker():
    i = 0
    while True:
        i += 1
        print("TICK %d" % i, flush=True)
        time.sleep(0.02)

d = threading.Thread(target=deep, args=(5000,), name="deep-recursion", daemon=True)
d.start()
ready.wait()
h = threading.Thread(target=locals_holder, name="locals-holder", daemon=True)
h.start()
GLOBAL_MARK = "main-global"
print("READY %d %d %d %d" % (os.getpid(), d.native_id, h.native_id, h.ident), flush=True)
threading.Thread(target=ticker, name="ticker", daemon=True).start()
sys.stdin.read()
'''

ENV = dict(PROBING="1", PROBING_ALLOW_EVAL="1", RANK="3", WORLD_SIZE="8", LOCAL_RANK="1", LOCAL_WORLD_SIZE="4",
           GROUP_RANK="0", PROBING_TP_RANK="1", PROBING_PP_RANK="0", DP_RANK="1", PROBING_ROLE_STAGE="decode",
           ROLE_NAME="trainer", PROBING_FOO_BAR="baz", MY_API_TOKEN="s3cret", AWS_SECRET_ACCESS_KEY="awsx",
           DB_PASSWORD="pw", PROBING_AUTH_TOKEN="tok-unix-only")


class Child(object):
    pass


@pytest.fixture(scope="module")
def child():
    t = H.Env()
    script = t.write("train_main.py", CHILD)
    p = H.spawn([script], t.env(**ENV))
    c = Child()
    try:
        line = H.readline(p, want="READY")
        _, pid, c.deep_tid, c.holder_tid, c.holder_ident = line.split()
        c.pid, c.deep_tid, c.holder_tid, c.holder_ident = int(pid), int(c.deep_tid), int(c.holder_tid), \
            int(c.holder_ident)
        c.env, c.proc, c.script = t, p, script
        c.sock = H.wait_path(t.sock(c.pid))
        deadline = time.time() + 60  # a hang guard
        while H.get(c.sock, "/ready").status != 200 and time.time() < deadline:
            time.sleep(0.02)
        yield c
    finally:
        H.stop(p)
        t.cleanup()


def test_core_health_ready(child):
    assert H.get(child.sock, "/health").json() == {"status": "ok"}
    assert H.get(child.sock, "/ready").json() == {"status": "ready"}
    assert H.get(child.sock, "/health/").status == 200


def test_core_socket_mode_and_dir(child):
    assert oct(os.stat(child.sock).st_mode & 0o777) == oct(0o600)
    assert os.stat(child.env.ctrl).st_mode & 0o7777 == 0o1777


def _stat22(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        data = f.read()
    return int(data[data.rindex(b")") + 2:].split()[19])


def test_core_identity_file_and_endpoint(child):
    ident = child.env.identity(child.pid)
    assert ident == H.get(child.sock, "/apis/identity").json()
    assert ident["agent"] == "probing-mcp" and ident["agent_version"]
    assert ident["pid"] == child.pid
    assert ident["start_time"] == _stat22(child.pid)
    assert (ident["rank"], ident["world_size"], ident["local_rank"], ident["local_world_size"],
            ident["node_rank"]) == (3, 8, 1, 4, 0)
    assert ident["role"] == "dp=1,pp=0,stage=decode,tp=1"
    assert ident["role_name"] == "trainer"
    assert ident["socket"] == child.sock and ident["addr"] == ""
    sig = int(signal.SIGRTMIN) + 3 if hasattr(signal, "SIGRTMIN") else int(signal.SIGUSR2)
    assert ident["faulthandler_signal"] == sig
    assert ident["faulthandler_file"] == os.path.join(child.env.data, str(child.pid), ".stacks.txt")
    assert os.path.exists(ident["faulthandler_file"])
    assert ident["eval_allowed"] is True
    assert ident["argv"] == [child.script]
    assert ident["python"].count(".") == 2 and ident["torch"] == ""
    assert ident["host"]
    # Written atomically: no temp files left behind.
    assert sorted(f for f in os.listdir(os.path.join(child.env.data, str(child.pid))) if f.startswith(".")) == \
        [".exceptions.jsonl", ".identity.json", ".signal.SIGINT.txt", ".signal.SIGTERM.txt", ".stacks.txt"]
    assert ident["exceptions_file"] == os.path.join(child.env.data, str(child.pid), ".exceptions.jsonl")


def test_core_overview(child):
    o = H.get(child.sock, "/apis/overview").json()
    assert o["pid"] == child.pid and o["main_thread"] == child.pid
    assert child.pid in o["threads"] and child.deep_tid in o["threads"]
    assert child.script in o["cmd"] and o["cwd"] and o["exe"]
    env = o["env"]
    assert env["PROBING_FOO_BAR"] == "baz" and env["RANK"] == "3"
    for k in ("MY_API_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "PROBING_AUTH_TOKEN"):
        assert k not in env
    assert "s3cret" not in json.dumps(o) and "tok-unix-only" not in json.dumps(o)
    assert o["identity"]["pid"] == child.pid
    assert o["agent"]["name"] == "probing-mcp"


def test_core_stacks_all_threads(child):
    s = H.get(child.sock, "/apis/stacks").json()
    assert s["pid"] == child.pid and s["gil_holder"] is None and s["captured_at_ns"] > 0
    th = s["threads"]
    assert th[0]["is_main"] and th[0]["name"] == "MainThread" and th[0]["native_id"] == child.pid
    names = [t["name"] for t in th[1:]]
    assert names == sorted(names)
    byname = dict((t["name"], t) for t in th)
    deep = byname["deep-recursion"]
    assert deep["native_id"] == child.deep_tid and deep["daemon"] is True
    assert len(deep["frames"]) == 200 and deep["frames_truncated"] is True
    assert deep["frames"][0]["function"] == "deep" and deep["frames"][0]["file"] == child.script
    holder = byname["locals-holder"]
    assert holder["frames"][0]["function"] == "locals_holder" and not holder["frames_truncated"]
    assert holder["frames"][-1]["function"] == "_bootstrap"  # innermost first, outermost last
    assert set(["file", "line", "function"]) == set(holder["frames"][0])


def test_core_stacks_huge_stack_capped(child):
    s = H.get(child.sock, "/apis/stacks?max_frames=100000").json()
    deep = [t for t in s["threads"] if t["name"] == "deep-recursion"][0]
    assert len(deep["frames"]) > 5000 and deep["frames_truncated"] is False
    s = H.get(child.sock, "/apis/stacks?max_frames=7").json()
    assert all(len(t["frames"]) <= 7 for t in s["threads"])


def test_core_callstack(child):
    main = H.get(child.sock, "/apis/pythonext/callstack").json()
    assert main[0]["PyFrame"]["func"] == "<module>" and main[0]["PyFrame"]["file"] == child.script
    assert set(main[0]["PyFrame"]) == set(["file", "func", "lineno", "locals"])
    assert H.get(child.sock, "/apis/pythonext/callstack?tid=0").json() == main
    for tid in (child.holder_tid, child.holder_ident):
        fr = H.get(child.sock, "/apis/pythonext/callstack?tid=%d" % tid).json()
        top = fr[0]["PyFrame"]
        assert top["func"] == "locals_holder"
        loc = top["locals"]
        assert loc["answer"]["class"] == "int" and loc["answer"]["value"] == "42"
        assert loc["text"]["value"] == "'hello'"
        assert loc["items"]["value"] == "len=3" and loc["blob"]["value"] == "<3 bytes>"
        assert isinstance(loc["answer"]["id"], int)
    r = H.get(child.sock, "/apis/pythonext/callstack?tid=12345")
    assert r.status == 400 and r.json() == {"error": "unknown thread id 12345", "frames": []}
    deep = H.get(child.sock, "/apis/pythonext/callstack?tid=%d&locals=0" % child.deep_tid).json()
    assert len(deep) == 200 and deep[0]["PyFrame"]["locals"] == {}


def test_core_config_get_set_keys(child):
    s = child.sock
    allc = H.get(s, "/config").json()
    assert allc["probing.foo.bar"] == "baz"
    assert allc["probing.loglevel"] == "warning"
    assert allc["probing.allow.eval"] == "true"
    assert allc["probing.server.unix_socket"] == child.sock
    assert not any("auth.token" in k for k in allc) and "tok-unix-only" not in json.dumps(allc)
    r = H.get(s, "/config/foo.bar")
    assert r.status == 200 and r.text == "baz" and r.headers["Content-Type"].startswith("text/plain")
    assert H.get(s, "/config/probing.foo.bar").text == "baz"
    r = H.get(s, "/config/no.such.key")
    assert r.status == 404
    assert r.json() == {"error": {"code": "NOT_FOUND", "message": "Config key 'probing.no.such.key' not found",
                                  "retryable": False}}
    r = H.request(s, "PUT", "/config/probing.loglevel", "info\n")
    assert r.status == 200
    assert r.json() == {"status": "ok", "key": "probing.loglevel", "value": "info", "previous": "warning"}
    r = H.request(s, "PUT", "/config/loglevel", "LOUD")
    assert r.status == 400
    msg = r.json()["error"]["message"]
    assert "probing.loglevel" in msg and "debug, info, warning, error" in msg
    assert H.get(s, "/config/loglevel").text == "info"
    r = H.request(s, "PUT", "/config/probing.server.address", "0.0.0.0:1")
    assert r.status == 403 and "read-only" in r.json()["error"]["message"]
    r = H.request(s, "PUT", "/config/probing.Bad-Key", "1")
    assert r.status == 400
    # Only registered keys can be written (test_core_trust.py has the rest).
    r = H.request(s, "PUT", "/config/custom.knob", "7")
    assert r.status == 404 and "settable keys:" in r.json()["error"]["message"]
    keys = H.get(s, "/config/_keys").json()
    byk = dict((k["key"], k) for k in keys)
    assert byk["probing.loglevel"]["settable"] is True and byk["probing.loglevel"]["doc"]
    assert byk["probing.server.address"]["settable"] is False
    assert byk["probing.foo.bar"] == {"key": "probing.foo.bar", "value": "baz", "settable": False,
                                      "doc": byk["probing.foo.bar"]["doc"]}
    H.request(s, "PUT", "/config/loglevel", "warning")


def _eval(child, code, timeout=None, **kw):
    q = "" if timeout is None else "?timeout=%s" % timeout
    r = H.request(child.sock, "POST", "/apis/pythonext/eval" + q, code, **kw)
    assert r.status == 200, r.body
    return r.json()


def test_core_eval_basics(child):
    r = _eval(child, "print('EVAL-ONLY-MARK')\nimport sys\nprint('to-err', file=sys.stderr)\nx = 20\nx + 1")
    assert r["status"] == "ok" and r["traceback"] == []
    assert r["output"] == "EVAL-ONLY-MARK\nto-err\n21\n"
    assert isinstance(r["duration_ms"], float)
    assert _eval(child, "x * 2")["output"] == "40\n"  # the namespace persists
    assert _eval(child, "GLOBAL_MARK")["output"] == "'main-global'\n"  # __main__'s globals
    assert _eval(child, "import sys\nsys.modules['__main__'].x")["output"] == "20\n"
    assert _eval(child, "None")["output"] == ""
    assert _eval(child, "def f():\n    return 5\n")["output"] == ""
    assert _eval(child, "f()")["output"] == "5\n"


def test_core_eval_errors(child):
    r = _eval(child, "print('before')\n1/0")
    assert r["status"] == "error" and r["output"] == "before\n"
    assert r["traceback"][0] == "Traceback (most recent call last):"
    assert r["traceback"][-1] == "ZeroDivisionError: division by zero"
    assert any("1/0" in line for line in r["traceback"])  # the source line is shown
    assert not any("evaluator.py" in line for line in r["traceback"])
    r = _eval(child, "def (:")
    assert r["status"] == "error" and "SyntaxError" in r["traceback"][-1]
    r = _eval(child, "raise SystemExit(3)")
    assert r["status"] == "error" and "SystemExit" in r["traceback"][-1]
    assert H.get(child.sock, "/health").status == 200


def test_core_eval_captures_only_its_thread(child):
    # The ticker thread prints concurrently; its lines must not be captured.
    r = _eval(child, "import time\nfor i in range(5):\n    print('E%d' % i)\n    time.sleep(0.05)\n")
    assert r["output"] == "E0\nE1\nE2\nE3\nE4\n"


def test_core_eval_timeout_thread_keeps_running(child):
    """The eval's timeout answers while its code still runs, and the code
    keeps running in its thread. The code spins until the test lets it go,
    so no machine is too slow for it: every wait is on a condition, with a
    hang guard."""
    go = os.path.join(child.env.root, "eval-go")
    code = ("import os, time\nprint('spinning', flush=True)\nt0 = time.time()\n"
            "while not os.path.exists(%r) and time.time() - t0 < 120:\n    pass\n" % go)
    res = {}

    def call():
        res["r"] = _eval(child, code, timeout=1)

    th = threading.Thread(target=call)
    t0 = time.time()
    th.start()
    try:
        # A CPU-bound eval holds the GIL only in slices: the server still answers.
        assert H.get(child.sock, "/health", timeout=60).status == 200
        th.join(120)
        assert not th.is_alive(), "the eval did not answer"
        r = res["r"]
        assert time.time() - t0 >= 0.9  # not before its timeout
        assert r["status"] == "timeout"
        assert r["output"].startswith("spinning\n") and "still running" in r["output"], r["output"]
        names = [t["name"] for t in H.get(child.sock, "/apis/stacks").json()["threads"]]
        assert any(n.startswith("probing-mcp-eval-") for n in names)
    finally:
        open(go, "w").close()
        th.join(120)


def test_core_eval_output_capped(child):
    r = _eval(child, "print('y' * (3 << 20))", timeout=30)
    assert r["status"] == "ok"
    assert (1 << 20) <= len(r["output"]) < (1 << 20) + 200 and "truncated" in r["output"]


def test_core_eval_bad_timeout(child):
    r = H.request(child.sock, "POST", "/apis/pythonext/eval?timeout=abc", "1")
    assert r.status == 400 and r.json()["error"]["code"] == "BAD_REQUEST"


def test_core_errors_and_malformed_requests(child):
    s = child.sock
    r = H.get(s, "/no/such/path")
    assert r.status == 404 and r.json()["error"]["code"] == "NOT_FOUND"
    r = H.request(s, "POST", "/health", "x")
    assert r.status == 405 and r.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    r = H.get(s, "/apis/pythonext/eval")
    assert r.status == 405
    out = H.raw(s, b"GARBAGE\r\n\r\n")
    assert out.split(b"\r\n")[0].split(b" ")[1] == b"400", out
    out = H.raw(s, b"\x00\xff\xfe nonsense \x01\r\n\r\n")
    assert b" 400 " in out.split(b"\r\n")[0], out
    out = H.raw(s, b"GET /health HTTP/1.1\r\nContent-Length: abc\r\n\r\n")
    assert b" 400 " in out.split(b"\r\n")[0], out
    out = H.raw(s, b"PUT /config/x HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (5 << 20))
    assert b" 413 " in out.split(b"\r\n")[0] and b"PAYLOAD_TOO_LARGE" in out, out
    out = H.raw(s, b"PUT /config/loglevel HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                   b"4\r\nwarn\r\n3\r\ning\r\n0\r\n\r\n")
    assert b" 200 " in out.split(b"\r\n")[0] and b'"value": "warning"' in out, out
    out = H.raw(s, b"BREW /health HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert b" 405 " in out.split(b"\r\n")[0] and b"METHOD_NOT_ALLOWED" in out, out
    out = H.raw(s, b"BREW /pot HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert b" 404 " in out.split(b"\r\n")[0], out
    # Still serving, and keep-alive works.
    c = H._UnixConn(s, 5)
    for _ in range(3):
        c.request("GET", "/health")
        r = c.getresponse()
        assert r.status == 200 and json.loads(r.read()) == {"status": "ok"}
    c.close()


def test_core_snapshot_without_fr_support(child):
    r = H.get(child.sock, "/apis/pythonext/flight-recorder/snapshot?format=json&raw=1")
    body = r.json()
    assert r.status in (400, 500) and body["ok"] is False and body["error"]
    r = H.get(child.sock, "/apis/pythonext/flight-recorder/snapshot?format=xml")
    assert r.status == 400 and r.json()["ok"] is False


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to another uid in a forked client")
def test_core_peer_credentials_rejected(child):
    """A client with another uid connects (the socket is made world-accessible
    for the test) and is closed without a reply."""
    os.chmod(child.env.ctrl, 0o1777)
    os.chmod(child.sock, 0o666)
    try:
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: become nobody, then try
            res = {}
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                import socket

                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(5)
                s.connect(child.sock)
                res["connected"] = True
                try:
                    s.sendall(b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n")
                    res["reply"] = s.recv(1000).decode("latin-1")
                except OSError as e:
                    res["reply"] = ""
                    res["err"] = str(e)
            except Exception as e:
                res["error"] = repr(e)
            os.write(wfd, json.dumps(res).encode())
            os._exit(0)
        os.close(wfd)
        os.waitpid(pid, 0)
        res = json.loads(os.read(rfd, 65536).decode())
        os.close(rfd)
    finally:
        os.chmod(child.sock, 0o600)
    assert res.get("connected") is True, res
    assert res["reply"] == "", res
    assert H.get(child.sock, "/health").status == 200  # root/same uid still served


def test_core_nodes(child):
    # Probing's /apis/nodes shape: this process is its own one-node registry.
    n = H.get(child.sock, "/apis/nodes").json()
    assert n["version"] == 1 and n["total"] == 1 and n["offset"] == 0
    node = n["nodes"][0]
    assert node["rank"] == 3 and node["status"] == "running" and node["timestamp"] > 0
    assert set(node) >= {"host", "addr", "local_rank", "rank", "world_size", "group_rank", "role", "status"}
    assert H.get(child.sock, "/apis/nodes?since_version=1").json()["nodes"] == []
    assert H.get(child.sock, "/apis/nodes?offset=1").json()["nodes"] == []
    assert H.get(child.sock, "/apis/nodes?limit=x").status == 400
    assert H.get(child.sock, "/apis/nodes?limit=-10").status == 400


def test_core_eval_output_not_on_real_stdout(child):
    # Ends the session for this child: its stdout must hold the ticker's lines
    # but none of the eval output.
    child.proc.stdin.close()
    child.proc.wait(10)
    out = child.proc.stdout.read()
    assert "TICK" in out
    assert "EVAL-ONLY-MARK" not in out and "E0\n" not in out and "spinning" not in out
    # At exit the agent removed its socket; the identity file stays.
    assert not os.path.exists(child.sock)
    assert os.path.exists(os.path.join(child.env.data, str(child.pid), ".identity.json"))

