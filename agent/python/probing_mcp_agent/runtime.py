"""Process-wide state of the agent: logger, data dir, identity, flags.

Other modules of the package (tables, collectives, fr, ...) read the state
through the functions here: data_dir(), pid_dir(), identity(),
update_identity(**fields), started(), and the `logger`.

Nothing here starts threads or imports anything heavy, so importing it is
cheap and safe in any process, activated or not.
"""
import json
import logging
import os
import sys
import threading

AGENT_NAME = "probing-mcp"
AGENT_VERSION = "0.2.0"
LOGGER_NAME = "probing_mcp_agent"
IDENTITY_FILE = ".identity.json"
STACKS_FILE = ".stacks.txt"

logger = logging.getLogger(LOGGER_NAME)

_LEVELS = {
    "debug": logging.DEBUG,
    "trace": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.ERROR,
}


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


def setup_logging(level="warning"):
    """Installs the agent's stderr handler once and sets its level."""
    try:
        if not any(getattr(h, "_probing_mcp", False) for h in logger.handlers):
            h = _StderrHandler()
            h._probing_mcp = True
            h.setFormatter(logging.Formatter("probing-mcp-agent[%(process)d] %(levelname)s: %(message)s"))
            logger.addHandler(h)
            logger.propagate = False
        set_log_level(level)
    except Exception:
        pass


def set_log_level(level):
    """level: debug, info, warning or error (aliases warn, trace, critical)."""
    lv = _LEVELS.get(str(level).strip().lower())
    if lv is None:
        raise ValueError("unknown log level %r" % (level,))
    logger.setLevel(lv)


class _State(object):
    def __init__(self):
        self.lock = threading.RLock()
        self.reset()

    def reset(self):
        self.started = False  # activate() ran to its end in this pid
        self.activating = False
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
        self.stood_aside = ""  # why the agent stood aside, if it did
        self.activation_mode = ""


state = _State()


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


def identity():
    """The identity object (agent/PROTOCOL.md), a copy. Before activation it
    is built from the environment, without writing anything."""
    with state.lock:
        if state.identity is None or state.identity.get("pid") != os.getpid():
            from . import identity as _identity

            state.identity = _identity.build()
        return dict(state.identity)


def update_identity(**fields):
    """Merges fields into the identity and rewrites .identity.json atomically
    (tmp file + rename). Returns the new identity (a copy)."""
    with state.lock:
        ident = identity()
        ident.update(fields)
        state.identity = ident
        try:
            write_identity(ident)
        except Exception as e:
            logger.warning("cannot write %s: %s", IDENTITY_FILE, e)
        return dict(ident)


def write_identity(ident=None):
    with state.lock:
        if ident is None:
            ident = identity()
        d = pid_dir()
        path = os.path.join(d, IDENTITY_FILE)
        tmp = "%s.tmp.%d.%d" % (path, os.getpid(), threading.get_ident())
        data = json.dumps(ident, indent=1, sort_keys=False, default=str)
        # 0o644 whatever the umask: the server believes an identity file
        # only when no one but its owner can have written it.
        with open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) as f:
            f.write(data)
            f.write("\n")
        os.replace(tmp, path)
        return path


def open_private(path, flags, mode=0o644):
    """Opens a file the agent writes with exactly mode (the umask cannot
    make it group- or world-writable), refusing a symlink in its place."""
    fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        os.fchmod(fd, mode)
    except OSError:
        pass
    return os.fdopen(fd, "a" if flags & os.O_APPEND else "w")


def identity_path():
    return os.path.join(data_dir(), str(os.getpid()), IDENTITY_FILE)


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
