"""Starts this node's daemon, `probing-mcp node`, from the agent of the
node's local rank 0 (agent/PROTOCOL.md, "Node daemon start").

The daemon lives outside the training processes and outlives them. It takes
a per-node lock (a second start exits at once, saying one runs) and exits
by itself once the node has had no live agent for its idle time. So each
local rank 0 starts one and forgets it; activation calls start() once.

Detached and reaped: `/bin/sh -c '"$@" &'` starts the daemon in the
background and exits at once. A daemon thread of the agent waits for that
sh (milliseconds), and the orphaned daemon is re-parented to init (or the
nearest subreaper), which reaps it whenever it ends. So the rank never
holds a zombie, nor a child that its own os.wait() could reap or that a
kill of the rank's process tree would take down. start_new_session puts
sh and the daemon in a session and process group of their own, out of the
rank's group, which torchrun signals as a whole (killpg) when it ends a
worker. Where there is no /bin/sh the daemon is the rank's own child, and
a daemon thread waits on it.

Everything runs in a daemon thread (subprocess is imported there), and
nothing raises into the program: each outcome is one log line.
"""
import os
import threading

from . import identity, runtime

ENV_SWITCH = "PROBING_MCP_NODE"
ENV_BIN = "PROBING_MCP_BIN"
ENV_ADDR = "PROBING_MCP_NODE_ADDR"
ENV_PORT = "PROBING_MCP_NODE_PORT"
ENV_IDLE = "PROBING_MCP_NODE_IDLE"
DEFAULT_PORT = 9781
DEFAULT_IDLE = "10m"
BIN_NAME = "probing-mcp"
RECORD_NAME = "node_bin.json"  # written by `probing-mcp agent install` (agent/installbin.go)
LOG_MAX = 4 << 20  # the daemon's log is emptied at a start past this
_MAX_RECORD = 64 << 10
_SH = "/bin/sh"
_OFF = ("0", "off", "false", "no")

last = None  # the last plan (tests and debugging)


def _clip(value, limit=80):
    s = repr(value[:limit])
    return s + "..." if len(value) > limit else s


def switched_off(environ):
    v = environ.get(ENV_SWITCH)
    return v is not None and v.strip().lower() in _OFF


def leader(environ):
    """(whether this process starts its node's daemon, why): local rank 0;
    without a local rank, rank 0; without either, a single process."""
    lr = identity._int(environ, identity._LOCAL_RANK)
    if lr >= 0:
        return lr == 0, "local rank %d" % lr
    r = identity._int(environ, identity._RANK)
    if r >= 0:
        return r == 0, "rank %d, no local rank" % r
    return True, "a single process (no rank)"


def address(environ):
    """(host:port, None) or (None, why): PROBING_MCP_NODE_ADDR, else all
    interfaces with PROBING_AUTH_TOKEN (the daemon then requires it), else
    loopback; the port is PROBING_MCP_NODE_PORT, default 9781."""
    a = (environ.get(ENV_ADDR) or "").strip()
    if a:
        return a, None
    port = DEFAULT_PORT
    raw = environ.get(ENV_PORT)
    if raw is not None and raw.strip():
        s = raw.strip()
        port = int(s) if s.isdigit() and len(s) <= 5 else -1
        if not 1 <= port <= 65535:
            return None, "%s=%s is not a port (1-65535)" % (ENV_PORT, _clip(raw))
    host = "0.0.0.0" if environ.get("PROBING_AUTH_TOKEN") else "127.0.0.1"
    return "%s:%d" % (host, port), None


def idle(environ):
    """(duration, None) or (None, why): PROBING_MCP_NODE_IDLE, a Go
    duration, default 10m."""
    raw = (environ.get(ENV_IDLE) or "").strip()
    if not raw:
        return DEFAULT_IDLE, None
    import re

    if raw == "0" or re.match(r"^(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+$", raw):
        return raw, None
    return None, "%s=%s is not a duration (e.g. 10m, 90s, 1h30m)" % (ENV_IDLE, _clip(raw))


def _executable_file(p):
    return os.path.isfile(p) and os.access(p, os.X_OK)


def _recorded(pkg_dir):
    """(path the install record names, None) or (None, what was wrong)."""
    rec = os.path.join(pkg_dir, RECORD_NAME)
    try:
        with open(rec, "rb") as f:
            data = f.read(_MAX_RECORD + 1)
    except FileNotFoundError:
        return None, "no install record %s" % rec
    except OSError as e:
        return None, "cannot read %s: %s" % (rec, e)
    try:
        import json

        if len(data) > _MAX_RECORD:
            raise ValueError("over %d bytes" % _MAX_RECORD)
        path = json.loads(data.decode("utf-8")).get("path")
        if not isinstance(path, str) or not os.path.isabs(path):
            raise ValueError("no absolute path in it")
    except Exception as e:
        return None, "the install record %s is unusable (%s)" % (rec, e)
    if not _executable_file(path):
        return None, "the install record %s names %s, which is not an executable file" % (rec, path)
    return path, None


def find_binary(environ, executable, pkg_dir):
    """(absolute path, None) or (None, (log level, why)). PROBING_MCP_BIN
    (a path, or a name looked up on PATH); else the one `probing-mcp agent
    install` recorded for this package; else the wheel's, in the sibling
    package probing_mcp; else probing-mcp beside the interpreter (a
    virtualenv's bin)."""
    explicit = (environ.get(ENV_BIN) or "").strip()
    if explicit:
        p = explicit
        if os.sep not in p:
            import shutil

            p = shutil.which(p) or p
        if _executable_file(p):
            return os.path.abspath(p), None
        return None, ("warning", "%s=%s is not an executable file: point it at a probing-mcp binary, or unset it"
                      % (ENV_BIN, _clip(explicit)))
    path, why = _recorded(pkg_dir)
    if path:
        return path, None
    looked = [ENV_BIN + " unset", why]
    # Installed with pip, the wheel's binary sits in the sibling package
    # (site-packages/probing_mcp/bin): the scripts dir holds only its
    # Python launcher, and is not beside the interpreter for --user.
    if pkg_dir:
        p = os.path.join(os.path.dirname(os.path.abspath(pkg_dir)), "probing_mcp", "bin", BIN_NAME)
        if _executable_file(p):
            return p, None
        looked.append("no wheel binary at " + p)
    if executable:
        p = os.path.join(os.path.dirname(os.path.abspath(executable)), BIN_NAME)
        if _executable_file(p):
            return p, None
        looked.append("none at " + p)
    return None, ("info", "no probing-mcp binary (%s); `probing-mcp agent install` places one, or set %s"
                  % ("; ".join(looked), ENV_BIN))


def plan(environ=None, executable=None, pkg_dir=None):
    """What start() does in this process, without doing it:
    {"start": bool, "level": log level, "why": str, "argv": [...]}."""
    import sys

    env = os.environ if environ is None else environ
    executable = sys.executable if executable is None else executable
    pkg_dir = os.path.dirname(os.path.abspath(__file__)) if pkg_dir is None else pkg_dir

    def no(level, why):
        return {"start": False, "level": level, "why": "not starting the node daemon: " + why, "argv": []}

    if switched_off(env):
        return no("debug", "%s=%s" % (ENV_SWITCH, env.get(ENV_SWITCH)))
    ok, who = leader(env)
    if not ok:
        return no("debug", "%s (only local rank 0 starts it)" % who)
    addr, err = address(env)
    if err is None:
        dur, err = idle(env)
    if err is not None:
        return no("warning", err + "; fix it, or set %s=0" % ENV_SWITCH)
    path, miss = find_binary(env, executable, pkg_dir)
    if path is None:
        return no(miss[0], miss[1])
    return {"start": True, "level": "info", "why": who, "argv": [path, "node", "--http", addr, "--idle-exit", dur]}


def log_path():
    return os.path.join(runtime.data_dir(), "node-daemon.%d.log" % os.geteuid())


def _open_log():
    """A descriptor on the daemon's log (append, 0600, ours, emptied past
    LOG_MAX), or None: the data dir is shared by users, so a file someone
    else put there is not written to."""
    import stat

    path = log_path()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:
        return None, ""
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return None, ""
        if st.st_size > LOG_MAX:
            os.ftruncate(fd, 0)
        return fd, path
    except OSError:
        os.close(fd)
        return None, ""


def _reap(p):
    try:
        p.wait()
    except Exception:
        pass


def spawn(argv, environ=None):
    """Starts argv detached (see the module's doc), with the environment
    (os.environ by default: the daemon reads MASTER_ADDR, the token, ...);
    returns (how, log). cwd is / so as not to hold the job's directory."""
    import subprocess

    fd, log = _open_log()
    out = subprocess.DEVNULL if fd is None else fd
    env = None if environ is None or environ is os.environ else dict(environ)
    kw = dict(stdin=subprocess.DEVNULL, stdout=out, stderr=out, close_fds=True, start_new_session=True, cwd="/",
              env=env)
    try:
        if _executable_file(_SH):
            p = subprocess.Popen([_SH, "-c", '"$@" &', "probing-mcp-node-start"] + list(argv), **kw)
            rc = p.wait()
            if rc != 0:
                raise OSError("%s exited with %d" % (_SH, rc))
            return "detached", log
        p = subprocess.Popen(list(argv), **kw)
        threading.Thread(target=_reap, args=(p,), name="probing-mcp-node-reaper", daemon=True).start()
        return "pid %d, a child of this process (no %s): a daemon thread reaps it" % (p.pid, _SH), log
    finally:
        if fd is not None:
            os.close(fd)


def _say(level, msg):
    getattr(runtime.logger, level)("%s", msg)


def _run(environ):
    global last
    argv = []
    try:
        p = plan(environ)
        last = p
        if not p["start"]:
            _say(p["level"], p["why"])
            return
        argv = p["argv"]
        how, log = spawn(argv, environ)
        runtime.logger.info("started the node daemon (%s; %s): %s; its output: %s", p["why"], how, " ".join(argv),
                            log or "discarded")
    except Exception as e:
        try:
            runtime.logger.warning("could not start the node daemon %s: %r", " ".join(argv), e)
        except Exception:
            pass


# A process that ends while the start thread is inside subprocess's fork
# and exec would finalize the interpreter under it (a daemon thread in C
# code then: one process in several hundred short ones died of a corrupted
# heap at exit in the start-up stress test). The spawn takes milliseconds;
# exit waits for it, a bounded while.
JOIN_AT_EXIT_S = 2.0


def _join_at_exit(t):
    try:
        t.join(JOIN_AT_EXIT_S)
    except Exception:
        pass


def start(environ=None):
    """Called once at activation. Decides cheaply here (most ranks are not
    local rank 0) and spawns from a daemon thread. Never raises."""
    try:
        env = os.environ if environ is None else environ
        if switched_off(env) or not leader(env)[0]:
            _run(env)  # logs why, at debug; spawns nothing
            return
        t = threading.Thread(target=_run, args=(env,), name="probing-mcp-node-start", daemon=True)
        t.start()
        import atexit  # built in: no import lock held long, nothing of the job's

        atexit.register(_join_at_exit, t)
    except Exception as e:
        try:
            runtime.logger.warning("could not start the node daemon: %r", e)
        except Exception:
            pass
