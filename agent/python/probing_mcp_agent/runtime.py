"""Process-wide state of the agent: logger, data dir, flags.

Other modules of the package (tables, collectives, fr, ...) read the state
through the functions here: data_dir(), pid_dir(), started(), and the
`logger`. The identity object kept in `state.identity` is built, read and
written by identity.py (current(), update_identity(**fields)), which
imports this module and not the other way round.

Nothing here starts threads or imports anything heavy, so importing it is
cheap and safe in any process, activated or not.
"""
import os
import sys
import threading

AGENT_NAME = "probing-mcp"
AGENT_VERSION = "0.2.0"
LOGGER_NAME = "probing_mcp_agent"
IDENTITY_FILE = ".identity.json"
STACKS_FILE = ".stacks.txt"

_LEVELS = {
    "debug": 10,
    "trace": 10,
    "info": 20,
    "warning": 30,
    "warn": 30,
    "error": 40,
    "critical": 40,
}


class _LazyLogger(object):
    """The agent's logger. logging (with the re, traceback and string it
    imports) costs more than the rest of an activation, and an import is
    the one thing the agent must never do from wherever it happens to log:
    a log line can come from under a lock, from an import hook, or from the
    main thread while another thread imports (each a deadlock with Python's
    import locks). So until the start-up's background part has imported
    logging (real_logger(), from its own thread, holding nothing), records
    at an enabled level are written straight to stderr in the same format;
    from then on this delegates to the real `probing_mcp_agent` logger."""

    def __init__(self):
        self._level = 30
        self._real = None

    def isEnabledFor(self, level):  # noqa: N802 (logging API)
        r = self._real
        return r.isEnabledFor(level) if r is not None else level >= self._level

    def setLevel(self, level):  # noqa: N802
        self._level = level
        if self._real is not None:
            self._real.setLevel(level)

    def log(self, level, msg, *args, **kwargs):
        r = self._real
        if r is not None:
            r.log(level, msg, *args, **kwargs)
        elif level >= self._level:
            _early_write(level, msg, args, kwargs.get("exc_info"))

    def debug(self, msg, *args, **kwargs):
        self.log(10, msg, *args, **kwargs)

    def info(self, msg, *args, **kwargs):
        self.log(20, msg, *args, **kwargs)

    def warning(self, msg, *args, **kwargs):
        self.log(30, msg, *args, **kwargs)

    def error(self, msg, *args, **kwargs):
        self.log(40, msg, *args, **kwargs)

    def exception(self, msg, *args, **kwargs):
        kwargs.setdefault("exc_info", True)
        self.log(40, msg, *args, **kwargs)


_LEVEL_NAMES = {10: "DEBUG", 20: "INFO", 30: "WARNING", 40: "ERROR"}


def _early_write(level, msg, args, exc_info):
    """One record in the real handler's format, without logging (no import,
    no lock): the exception, if any, as its repr (traceback is an import)."""
    try:
        text = str(msg) % args if args else str(msg)
    except Exception:
        text = "%s %r" % (msg, args)
    if exc_info:
        e = sys.exc_info()[1] if exc_info is True else (exc_info if isinstance(exc_info, BaseException) else None)
        if e is not None:
            text += " (%r)" % (e,)
    try:
        stream = sys.stderr or sys.__stderr__
        if stream is not None:
            stream.write("probing-mcp-agent[%d] %s: %s\n" % (os.getpid(), _LEVEL_NAMES.get(level, level), text))
            stream.flush()
    except Exception:
        pass


logger = _LazyLogger()
_logger_lock = threading.Lock()


def real_logger():
    """The logging.Logger behind `logger`, with the agent's stderr handler.
    Imports logging: called only by the start-up's background part, in its
    own thread, with no lock held (see _LazyLogger)."""
    r = logger._real
    if r is not None:
        return r
    import logging  # before the lock: never import while holding one

    class _StderrHandler(logging.Handler):
        """Writes to the *current* sys.stderr; never raises."""

        def emit(self, record):
            try:
                stream = sys.stderr or sys.__stderr__
                if stream is None:
                    return
                stream.write(self.format(record) + "\n")
                stream.flush()
            except Exception:
                pass

        def handleError(self, record):  # noqa: N802 (logging API)
            pass

    lg = logging.getLogger(LOGGER_NAME)
    with _logger_lock:
        if logger._real is None:
            if not any(getattr(h, "_probing_mcp", False) for h in lg.handlers):
                h = _StderrHandler()
                h._probing_mcp = True
                h.setFormatter(logging.Formatter("probing-mcp-agent[%(process)d] %(levelname)s: %(message)s"))
                lg.addHandler(h)
                lg.propagate = False
            lg.setLevel(logger._level)
            logger._real = lg
        return logger._real


def setup_logging(level="warning"):
    """Sets the agent's log level (the stderr handler comes with the first
    record, see _LazyLogger)."""
    try:
        set_log_level(level)
    except Exception:
        pass


def set_log_level(level):
    """level: debug, info, warning or error (aliases warn, trace, critical)."""
    lv = _LEVELS.get(str(level).strip().lower())
    if lv is None:
        raise ValueError("unknown log level %r" % (level,))
    logger.setLevel(lv)


_ESC = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _quote(s):
    """A JSON string literal, ASCII only, as json.dumps writes it."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    out = ['"']
    for ch in s:
        e = _ESC.get(ch)
        if e is not None:
            out.append(e)
            continue
        o = ord(ch)
        if 0x20 <= o < 0x7f:
            out.append(ch)
        elif o < 0x10000:
            out.append("\\u%04x" % o)
        else:
            o -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xd800 | (o >> 10), 0xdc00 | (o & 0x3ff)))
    out.append('"')
    return "".join(out)


def dumps(obj):
    """JSON text of obj: what json.dumps(obj, default=str) says, compact.
    The agent's own files are written with it at activation and at exit,
    where importing json (and the re it compiles) would cost every
    interpreter start."""
    q = _quote
    out = []

    def enc(o, depth):
        if depth > 64:
            raise ValueError("too deeply nested")
        if o is None:
            out.append("null")
        elif o is True:
            out.append("true")
        elif o is False:
            out.append("false")
        elif isinstance(o, str):
            out.append(q(o))
        elif isinstance(o, int):
            out.append(int.__repr__(o))
        elif isinstance(o, float):
            if o != o:
                out.append("NaN")
            elif o in (float("inf"), float("-inf")):
                out.append("Infinity" if o > 0 else "-Infinity")
            else:
                out.append(float.__repr__(o))
        elif isinstance(o, dict):
            out.append("{")
            for i, (k, v) in enumerate(o.items()):
                if i:
                    out.append(",")
                if isinstance(k, str):
                    out.append(q(k))
                elif k is None or isinstance(k, (bool, int, float)):
                    out.append(q(dumps(k)))
                else:
                    out.append(q(str(k)))
                out.append(":")
                enc(v, depth + 1)
            out.append("}")
        elif isinstance(o, (list, tuple)):
            out.append("[")
            for i, v in enumerate(o):
                if i:
                    out.append(",")
                enc(v, depth + 1)
            out.append("]")
        else:
            out.append(q(str(o)))

    enc(obj, 0)
    return "".join(out)


class _State(object):
    def __init__(self):
        self.lock = threading.RLock()
        self.reset()

    def reset(self):
        self.started = False  # activate() ran to its end in this pid
        self.activating = False
        self.completing = False  # activation.complete() is running
        self.ready = False
        self.pid = None  # the pid that activated
        self.data_dir = None
        self.identity = None
        self.socket_path = ""
        self.tcp_address = ""
        self.eval_allowed = False  # served on the control socket (activation.eval_policy)
        self.eval_tcp = False  # also served over TCP, to token holders
        self.eval_refusal = ""  # why not, when eval_allowed is False
        self.auth_token = ""  # never exposed through config or identity
        self.auth_username = "admin"
        self.stack_signal = -1
        self.stack_file = ""
        self.stack_fh = None
        self.crash_file = ""
        self.crash_fh = None
        self.servers = []
        self.unix_listener = None  # (socket, path, inode) bound by ctrl.py, until server.py takes it over
        self.stood_aside = ""  # why the agent stood aside, if it did
        self.activation_mode = ""


state = _State()

# Wakes the start-up's background part (activation.py) before its delay:
# torch's first import, the control socket's first client, a recorder's
# first ring, wait_ready(). Here, not in activation, so that what sets it
# (tables.py) need not know the start-up.
complete_kick = threading.Event()


def request_complete():
    """Asks for the background part without doing or waiting for any of it:
    for callers that may hold a lock or run on the program's threads (a
    recorder's first ring). Without the background thread (a manual
    activation completes at once) it is a no-op."""
    complete_kick.set()


def started():
    """True once the agent is active in *this* process (not a forked child)."""
    return bool(state.started and state.pid == os.getpid())


def _default_data_dir(environ=None):
    env = os.environ if environ is None else environ
    d = env.get("PROBING_DATA_DIR")
    if d:
        return d
    if sys.platform.startswith("linux") and os.path.isdir("/dev/shm"):
        return "/dev/shm/probing"
    import tempfile

    return os.path.join(env.get("TMPDIR") or tempfile.gettempdir(), "probing")


def _makedirs(path, mode):
    """Creates path (missing parents 0o755); chmods path to mode only if it
    created it (so umask does not decide, and an existing dir is left be)."""
    if os.path.isdir(path):
        return path
    parent = os.path.dirname(path.rstrip(os.sep))
    if parent and parent != path and not os.path.isdir(parent):
        _makedirs(parent, 0o755)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return path
    try:
        os.chmod(path, mode)
    except OSError:
        pass
    return path


def data_dir():
    """PROBING_DATA_DIR, else /dev/shm/probing, else $TMPDIR/probing.

    Fixed at activation; before it, read from the environment each call.
    """
    return state.data_dir or _default_data_dir()


_pid_dirs = {}


def pid_dir():
    """<data dir>/<pid>, created (0o755) on first use. The data dir itself is
    created sticky and world-writable (1777), as several users share it."""
    pid = os.getpid()
    base = data_dir()
    key = (base, pid)
    d = _pid_dirs.get(key)
    if d and os.path.isdir(d):
        return d
    _makedirs(base, 0o1777)
    d = _makedirs(os.path.join(base, str(pid)), 0o755)
    try:
        uid = os.stat(d).st_uid
        if uid not in (os.geteuid(), 0):
            logger.warning("%s belongs to uid %d, not to this process's user: the server will not trust what is "
                           "written there (someone created it before this process started)", d, uid)
    except OSError:
        pass
    _pid_dirs[key] = d
    return d


def crash_dir():
    base = data_dir()
    _makedirs(base, 0o1777)
    _makedirs(os.path.join(base, "crash"), 0o1777)
    return _makedirs(os.path.join(base, "crash", str(os.getpid())), 0o755)


def open_private(path, flags, mode=0o644):
    """Opens a file the agent writes with exactly mode (the umask cannot
    make it group- or world-writable), refusing a symlink in its place."""
    fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        os.fchmod(fd, mode)
    except OSError:
        pass
    return os.fdopen(fd, "a" if flags & os.O_APPEND else "w")


def _after_fork_in_child():
    """A forked child inherits our state but none of our threads. It is not
    an active agent (activation is per process, through PROBING at exec)."""
    try:
        state.lock = threading.RLock()
        servers = state.servers
        state.servers = []
        for s in servers:
            try:
                s.socket.close()  # the child's copy of the listening fd
            except Exception:
                pass
        lst = state.unix_listener
        state.unix_listener = None
        if lst is not None:
            try:
                lst[0].close()  # the child's copy only (no shutdown: that would stop the parent's)
            except Exception:
                pass
        state.started = False
        state.ready = False
        state.activating = False
        state.identity = None
        state.socket_path = ""
        state.tcp_address = ""
        _pid_dirs.clear()
    except Exception:
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
