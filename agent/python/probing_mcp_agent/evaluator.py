"""POST /apis/pythonext/eval: run code inside the process.

- The code runs in a fresh daemon thread, with the globals of the process's
  __main__ module, as in `python -i`: the training script's globals (model,
  optimizer, ...) are visible, and variables persist between calls (they
  land in __main__). Without a usable __main__, a private dict is used.
- When the last statement is an expression, its repr is printed, as in a
  REPL or a notebook cell (`_` is not set: that could clobber the script's).
- stdout/stderr are captured for that thread only: on first use sys.stdout
  and sys.stderr are wrapped once in a proxy that routes writes from a
  capturing thread to its buffer and everything else to the real stream.
  Writes through `sys.stdout.buffer` or to file descriptors are not captured.
- On timeout the reply comes at the deadline with status "timeout"; the
  thread keeps running (Python cannot kill a thread), which the output says.
- Output is capped at 1 MiB.
"""
import ast
import builtins
import linecache
import sys
import threading
import time
import traceback

from . import runtime

MAX_OUTPUT = 1 << 20
DEFAULT_TIMEOUT = 10.0
MAX_TIMEOUT = 300.0
MAX_RUNNING = 16  # eval threads still running (timed out) before we refuse more

_lock = threading.Lock()
_capture = {}  # thread ident -> _Buffer
_ns = None
_counter = [0]
_sources = []  # linecache names we added, oldest first


class Busy(Exception):
    pass


class _Buffer(object):
    def __init__(self, cap=MAX_OUTPUT):
        self.parts = []
        self.size = 0
        self.cap = cap
        self.truncated = False
        self.lock = threading.Lock()

    def write(self, s):
        if not isinstance(s, str):
            s = str(s)
        with self.lock:
            room = self.cap - self.size
            if room <= 0:
                self.truncated = True
                return len(s)
            if len(s) > room:
                self.parts.append(s[:room])
                self.size += room
                self.truncated = True
            else:
                self.parts.append(s)
                self.size += len(s)
        return len(s)

    def getvalue(self):
        with self.lock:
            return "".join(self.parts)


class _Proxy(object):
    """Thread-aware stand-in for sys.stdout / sys.stderr."""

    def __init__(self, stream):
        object.__setattr__(self, "_probing_stream", stream)

    def write(self, s):
        buf = _capture.get(threading.get_ident())
        if buf is not None:
            return buf.write(s)
        st = self._probing_stream
        if st is None:
            return len(s)
        return st.write(s)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if threading.get_ident() in _capture:
            return None
        st = self._probing_stream
        if st is not None:
            return st.flush()

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_probing_stream"), name)

    def __setattr__(self, name, value):
        setattr(self._probing_stream, name, value)

    def __repr__(self):
        return "<probing-mcp capture proxy for %r>" % (self._probing_stream,)


def _install_proxies():
    """Wraps sys.stdout/sys.stderr once; again only if someone replaced them."""
    if not isinstance(sys.stdout, _Proxy):
        sys.stdout = _Proxy(sys.stdout)
    if not isinstance(sys.stderr, _Proxy):
        sys.stderr = _Proxy(sys.stderr)


def namespace():
    """__main__'s globals (looked up each call: runpy keeps the module, but
    a program may replace it), else a private persistent dict."""
    global _ns
    m = sys.modules.get("__main__")
    d = getattr(m, "__dict__", None)
    if isinstance(d, dict):
        return d
    with _lock:
        if _ns is None:
            _ns = {"__name__": "__main__", "__builtins__": builtins, "__doc__": None}
        return _ns


def _register_source(name, code):
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    _sources.append(name)
    while len(_sources) > 100:
        linecache.cache.pop(_sources.pop(0), None)


def _compile(code, name):
    tree = ast.parse(code, name, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, name, "exec")
    expr = compile(last, name, "eval") if last is not None else None
    return body, expr


def _format_tb(exc_type, exc, tb):
    # Skip our own frames (this module) at the top of the traceback.
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    lines = traceback.format_exception(exc_type, exc, tb)
    out = []
    for chunk in lines:
        out.extend(chunk.rstrip("\n").split("\n"))
    return out


def running():
    return sum(1 for t in threading.enumerate() if t.name.startswith("probing-mcp-eval-"))


def run(code, timeout=DEFAULT_TIMEOUT):
    """Runs code; returns {"status","output","traceback","duration_ms"}."""
    timeout = max(0.001, min(float(timeout), MAX_TIMEOUT))
    if running() >= MAX_RUNNING:
        raise Busy("%d earlier evals are still running; refusing more" % running())
    _install_proxies()
    ns = namespace()
    with _lock:
        _counter[0] += 1
        n = _counter[0]
    name = "<probing-eval-%d>" % n
    buf = _Buffer()
    result = {"status": "ok", "traceback": []}
    done = threading.Event()

    def target():
        me = threading.get_ident()
        _capture[me] = buf
        try:
            _register_source(name, code)
            body, expr = _compile(code, name)
            exec(body, ns)
            if expr is not None:
                value = eval(expr, ns)
                if value is not None:
                    buf.write(repr(value) + "\n")
        except BaseException:
            et, ev, tb = sys.exc_info()
            result["status"] = "error"
            try:
                result["traceback"] = _format_tb(et, ev, tb)
            except Exception:
                result["traceback"] = ["%s: %s" % (et.__name__, ev)]
            del tb
        finally:
            done.set()
            _capture.pop(me, None)

    t0 = time.monotonic()
    th = threading.Thread(target=target, name="probing-mcp-eval-%d" % n, daemon=True)
    th.start()
    finished = done.wait(timeout)
    dur = (time.monotonic() - t0) * 1000.0
    output = buf.getvalue()
    if buf.truncated:
        output += "\n[probing-mcp: output truncated at %d bytes]\n" % buf.cap
    if not finished:
        output += ("\n[probing-mcp: still running after %gs in thread %s (native id %s); "
                   "Python cannot stop a thread, so it keeps running in the background]\n"
                   % (timeout, th.name, getattr(th, "native_id", None)))
        runtime.logger.warning("eval %s timed out after %gs; its thread keeps running", name, timeout)
        return {"status": "timeout", "output": output, "traceback": [], "duration_ms": round(dur, 3)}
    return {"status": result["status"], "output": output, "traceback": result["traceback"],
            "duration_ms": round(dur, 3)}
