"""Helpers for the core agent tests (test_core_*.py).

How the site hook is exercised faithfully: .pth files are only processed in
site directories, at start-up. Each test child gets, on PYTHONPATH, a boot
dir whose sitecustomize.py calls site.addsitedir(SITE), where SITE holds
probing_mcp_agent.pth ("import probing_mcp_agent._hook", as agent/install.go
writes it). So the hook runs during interpreter start-up, through site's own
.pth processing, with sys.argv already set and before __main__ runs, exactly
as in an installed interpreter.

The children's interpreter is $PROBING_TEST_PYTHON (default: the one running
pytest), so the whole suite can exercise the agent under Python 3.9.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
AGENT_PY = os.path.dirname(HERE)  # agent/python
PKG = os.path.join(AGENT_PY, "probing_mcp_agent")
PYTHON = os.environ.get("PROBING_TEST_PYTHON") or sys.executable

# A test run started as a background job of a non-interactive shell (nohup,
# some CI runners) inherits SIGINT ignored, and exec passes an ignored
# signal on: every child would then ignore SIGINT, and the tests of what
# SIGINT does to an agent's process could not pass. The children start as
# from a terminal: a caught (not ignored) signal is reset by exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_SCRUB_PREFIXES = ("PROBING", "SLURM_", "OMPI_", "PMI_", "TORCHELASTIC_", "MPI_")
_SCRUB = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "ROLE_NAME",
          "TP_RANK", "PP_RANK", "DP_RANK", "PYTHONPATH", "PYTHONFAULTHANDLER", "PYTHONSTARTUP")


class Env(object):
    """A temp tree: site dir with the .pth, boot dir, data dir, ctrl root."""

    def __init__(self, base=None):
        # Short paths: AF_UNIX paths are limited to 107 bytes.
        self.root = tempfile.mkdtemp(prefix="pmcp-", dir=base or "/tmp")
        os.chmod(self.root, 0o755)
        self.site = os.path.join(self.root, "site")
        self.boot = os.path.join(self.root, "boot")
        self.data = os.path.join(self.root, "data")
        self.ctrl = os.path.join(self.root, "ctrl")
        for d in (self.site, self.boot):
            os.makedirs(d)
        with open(os.path.join(self.site, "probing_mcp_agent.pth"), "w") as f:
            f.write("import probing_mcp_agent._hook\n")
        with open(os.path.join(self.boot, "sitecustomize.py"), "w") as f:
            f.write("import site\nsite.addsitedir(%r)\n" % self.site)

    def env(self, **extra):
        e = dict((k, v) for k, v in os.environ.items()
                 if not k.startswith(_SCRUB_PREFIXES) and k not in _SCRUB)
        e["PYTHONPATH"] = os.pathsep.join([self.boot, AGENT_PY])
        e["PROBING_DATA_DIR"] = self.data
        e["PROBING_CTRL_ROOT"] = self.ctrl
        e["PYTHONUNBUFFERED"] = "1"
        # No child starts a node daemon unless its test asks for one
        # (PROBING_MCP_NODE=None): test_core_nodestart.py.
        e["PROBING_MCP_NODE"] = "0"
        for k, v in extra.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        return e

    def write(self, name, text):
        p = os.path.join(self.root, name)
        d = os.path.dirname(p)
        if not os.path.isdir(d):
            os.makedirs(d)
        with open(p, "w") as f:
            f.write(text)
        return p

    def sock(self, pid):
        return os.path.join(self.ctrl, "%d.sock" % pid)

    def identity(self, pid):
        with open(os.path.join(self.data, str(pid), ".identity.json")) as f:
            return json.load(f)

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)


def run(args, env, timeout=60, **kw):
    return subprocess.run([PYTHON] + list(args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout, universal_newlines=True, **kw)


def spawn(args, env, **kw):
    return subprocess.Popen([PYTHON] + list(args), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True, **kw)


def readline(proc, timeout=60, want=None):
    """Reads stdout lines until one starts with want (or any line)."""
    import select

    deadline = time.time() + timeout
    while time.time() < deadline:
        r, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.time()))
        if not r:
            break
        line = proc.stdout.readline()
        if not line:
            break
        if want is None or line.startswith(want):
            return line.rstrip("\n")
    raise AssertionError("child printed no %r line; stderr: %s" % (want, _stderr(proc)))


def _stderr(proc):
    try:
        if proc.poll() is None:
            proc.kill()
        return proc.stderr.read()[-3000:]
    except Exception as e:
        return "<%s>" % e


def stop(proc):
    if proc.poll() is None:
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.wait(5)
    except Exception:
        pass
    for f in (proc.stdin, proc.stdout, proc.stderr):
        try:
            if f:
                f.close()
        except Exception:
            pass


IDLE_CHILD = "import sys\nprint('UP', flush=True)\nsys.stdin.read()\n"


def spawn_agent(tree, **env):
    """An idle child with the agent active (PROBING=1 and env): (proc, the
    control socket), once the agent is ready."""
    script = tree.write("idle_child.py", IDLE_CHILD)
    p = spawn([script], tree.env(PROBING="1", **env))
    readline(p, want="UP")
    sock = wait_path(tree.sock(p.pid))
    deadline = time.time() + 60  # a hang guard
    while get(sock, "/ready").status != 200 and time.time() < deadline:
        time.sleep(0.02)
    return p, sock


def finish(proc):
    """Ends a child started by spawn_agent (stdin closed); returns its stderr."""
    try:
        proc.stdin.close()
        proc.wait(10)
        return proc.stderr.read()
    finally:
        stop(proc)


def wait_path(path, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path):
            return path
        time.sleep(0.02)
    raise AssertionError("%s did not appear" % path)


class _UnixConn(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        http.client.HTTPConnection.__init__(self, "agent", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


class Reply(object):
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    @property
    def text(self):
        return self.body.decode("utf-8")

    def json(self):
        return json.loads(self.body.decode("utf-8"))


def request(target, method, path, body=None, headers=None, timeout=30):
    """target: a socket path, or (host, port) for TCP."""
    if isinstance(target, tuple):
        c = http.client.HTTPConnection(target[0], target[1], timeout=timeout)
    else:
        c = _UnixConn(target, timeout)
    try:
        if isinstance(body, str):
            body = body.encode("utf-8")
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return Reply(r.status, dict(r.getheaders()), r.read())
    finally:
        c.close()


def get(target, path, **kw):
    return request(target, "GET", path, **kw)


def raw(target, data, timeout=5, shut_wr=False):
    """Sends raw bytes on the Unix socket (a path) or TCP ((host, port));
    returns everything read back. shut_wr: half-close after sending, so a
    server reading a body that is cut short sees its end at once."""
    if isinstance(target, tuple):
        s = socket.create_connection(target, timeout=timeout)
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(target)
    try:
        s.sendall(data)
        if shut_wr:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            if not b:
                break
            out += b
        return out
    finally:
        s.close()


def signal_number(name):
    return int(getattr(signal, name))
