"""Starts the agent in this process (idempotent).

In two parts, because the site hook runs it in every activated interpreter
(PROBING=2: every child), where its cost is the start-up time of each:

1. In the caller, what must hold before the program's first line, and only
   that: the Flight Recorder variables (before torch reads them),
   faulthandler (stack signal, crash file), the control socket bound and
   listening (ctrl.py), the identity file, the exit records, the identity
   watcher and (local rank 0) the node daemon's start, each a thread. It
   imports no more than os, sys, threading, faulthandler, _socket, _signal
   and _json.
2. complete(), once: logging, the config keys, the table and Flight
   Recorder modules (their torch hooks are post-import hooks: torch is not
   imported), then `ready`. It runs in one background thread, woken by the
   first import of torch (a finder on sys.meta_path that finds nothing), by
   the control socket's first client, by the first ring a recorder creates,
   by probing_mcp_agent.wait_ready(), or after PROBING_MCP_COMPLETE_AFTER
   seconds; a manual activate() runs it at once in the caller.

Why it cannot stall the program. Python calls meta-path finders holding its
global import lock, and a thread that is importing a module holds that
module's lock while it waits for the global one. A wait on anything that
such a thread can hold, from under the global lock, is a deadlock (issue
22: rank 0 frozen in `import torch` while the node starter imported json).
So: the finders here and in importhooks only set an Event or read a dict;
no lock of the agent's is ever held across an import (logging is imported
only by the background thread; every other import comes before the lock);
and the program's threads never wait for the background part (it is only
woken from them): only agent threads and wait_ready() wait, and never
while holding a lock. tests/test_core_nostall.py audits every lock and
import at run time and stresses the start-up under load.

Every step is guarded: a failing step is logged and the others still run;
nothing here raises into the training process.
"""
import atexit
import os
import sys
import threading

from . import runtime

# Set when complete() has run.
ready_event = threading.Event()

_OFF = ("0", "off", "false", "no")
_ON = ("1", "true", "on", "yes")


def original_probing_active():
    """A reason string when the original Probing agent is active in this
    process (its package imported by its own site hook), else ""."""
    m = sys.modules.get("probing")
    if m is None or getattr(m, "__name__", "") != "probing":
        return ""
    if "probing_hook" in sys.modules or "probing.site_hook" in sys.modules or "probing._core" in sys.modules:
        return "the original Probing agent is active in this process (module 'probing' loaded by its site hook)"
    return ""


def _optional(modname, funcname, *args, **kwargs):
    """Calls .<modname>.<funcname>(); a missing module is skipped quietly."""
    try:
        mod = __import__(__package__ + "." + modname, fromlist=["_"])
    except ImportError as e:
        if getattr(e, "name", None) in (__package__ + "." + modname, modname):
            runtime.logger.debug("%s not present: %s", modname, e)
        else:
            runtime.logger.warning("cannot import %s: %s", modname, e)
        return None
    except Exception as e:
        runtime.logger.warning("cannot import %s: %r", modname, e)
        return None
    fn = getattr(mod, funcname, None)
    if fn is None:
        runtime.logger.debug("%s.%s missing", modname, funcname)
        return None
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        runtime.logger.warning("%s.%s() failed: %r", modname, funcname, e,
                               exc_info=runtime.logger.isEnabledFor(10))
        return None


def _loglevel_validator(value):
    s = str(value).strip().lower()
    s = {"warn": "warning", "trace": "debug", "critical": "error"}.get(s, s)
    if s not in ("debug", "info", "warning", "error"):
        raise ValueError("accepted values are debug, info, warning, error")
    return s


def _register_core_keys(st):
    from . import config

    config.register("probing.loglevel", "warning", "the agent's logger level (debug, info, warning, error)",
                    validator=_loglevel_validator, on_change=runtime.set_log_level)
    ro = [
        ("probing.server.address", "", "bound TCP address of the control server (\"\" = none)"),
        ("probing.server.unix_socket", "", "path of the control Unix socket"),
        ("probing.allow.eval", "false", "whether POST /apis/pythonext/eval is served on the control socket "
                                        "(true unless the job set PROBING_ALLOW_EVAL=0)"),
        ("probing.allow.eval.tcp", "false", "whether eval is also served over TCP to token holders "
                                            "(PROBING_ALLOW_EVAL=1 at start)"),
        ("probing.data.dir", "", "data dir: identity file, stack dumps, MEMT tables"),
        ("probing.ctrl.root", "", "directory of the control socket"),
        ("probing.stack.signal", "-1", "signal that makes faulthandler append all stacks to .stacks.txt"),
        ("probing.crash.backtrace", "on", "fatal-signal stacks to <data dir>/crash/<pid>/faulthandler.txt"),
    ]
    for key, default, doc in ro:
        config.register(key, default, doc + " (read-only)", settable=False)


def _set_core_values(st):
    from . import config

    for key, value in (("probing.server.address", st.tcp_address),
                       ("probing.server.unix_socket", st.socket_path),
                       ("probing.allow.eval", "true" if st.eval_allowed else "false"),
                       ("probing.allow.eval.tcp", "true" if st.eval_tcp else "false"),
                       ("probing.data.dir", st.data_dir),
                       ("probing.ctrl.root", _ctrl_root()),
                       ("probing.stack.signal", str(st.stack_signal if st.stack_signal else -1)),
                       ("probing.crash.backtrace", "on" if st.crash_file else "off")):
        _step("config " + key, config.set_internal, key, value)


def _ctrl_root():
    from . import ctrl

    return ctrl.ctrl_root()


def eval_policy(environ=None):
    """(on the control socket, over TCP, why not) from PROBING_ALLOW_EVAL.

    Unset: the control socket only. Its peers are the job's own user or
    root, who can already change the job's code, and the server that calls
    it has its own switch (PROBING_MCP_ALLOW_WRITE). 1/true/on/yes: TCP too
    (token holders, possibly other hosts). 0/false/off/no: the job's
    opt-out, everywhere. Anything else is refused everywhere: a switch
    that guards code execution fails closed."""
    env = os.environ if environ is None else environ
    raw = env.get("PROBING_ALLOW_EVAL")
    v = (raw or "").strip().lower()
    if v == "":
        return True, False, ""
    if v in _ON:
        return True, True, ""
    if v in _OFF:
        return False, False, ("eval is off in this process: the job opted out with PROBING_ALLOW_EVAL=%s; "
                              "restart it without that variable to allow eval" % raw.strip())
    return False, False, ("eval is off in this process: PROBING_ALLOW_EVAL=%r is neither 1/true/on/yes nor "
                          "0/false/off/no; restart the job without it (or with 1) to allow eval" % raw[:40])


def _pick_stack_signal():
    import _signal as signal  # signal.py's enums cost every start

    raw = (os.environ.get("PROBING_STACK_SIGNAL") or "").strip()
    if raw:
        if raw.lower() in _OFF + ("none", "-1"):
            return None
        try:
            n = int(raw)
        except ValueError:
            n = getattr(signal, raw.upper(), None)
            if n is None:
                n = getattr(signal, "SIG" + raw.upper(), None)
            if n is None:
                runtime.logger.warning("PROBING_STACK_SIGNAL=%r is not a signal; using the default", raw)
                raw = ""
            else:
                n = int(n)
    if not raw:
        if hasattr(signal, "SIGRTMIN") and hasattr(signal, "SIGRTMAX") and int(signal.SIGRTMIN) + 3 <= int(signal.SIGRTMAX):
            n = int(signal.SIGRTMIN) + 3
        else:
            n = int(signal.SIGUSR2)
    # The server sends only SIGUSR1, SIGUSR2 or a real-time signal, and only
    # once it sees the handler installed: any other would stop or reload
    # programs that catch it.
    usable = set(int(getattr(signal, s)) for s in ("SIGUSR1", "SIGUSR2") if hasattr(signal, s))
    if hasattr(signal, "SIGRTMIN") and hasattr(signal, "SIGRTMAX"):
        usable.update(range(int(signal.SIGRTMIN), int(signal.SIGRTMAX) + 1))
    if n not in usable:
        runtime.logger.warning("PROBING_STACK_SIGNAL=%s cannot be used for stack dumps (use SIGUSR1, SIGUSR2 or a "
                               "real-time signal); none registered", n)
        return None
    return n


def _install_stack_dump(st):
    import _signal as signal
    import faulthandler

    n = _pick_stack_signal()
    if n is None:
        return
    try:
        h = signal.getsignal(n)
    except (ValueError, OSError):
        h = None
    if callable(h) or h == signal.SIG_IGN:
        runtime.logger.warning("signal %d already has a handler in this program; no faulthandler stack dump", n)
        return
    path = os.path.join(runtime.pid_dir(), runtime.STACKS_FILE)
    fh = runtime.open_private(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        faulthandler.register(n, file=fh, all_threads=True, chain=False)
    except Exception:
        fh.close()
        raise
    st.stack_signal, st.stack_file, st.stack_fh = n, path, fh


def _install_crash_handler(st):
    import faulthandler

    if (os.environ.get("PROBING_CRASH_BACKTRACE") or "on").strip().lower() in _OFF:
        return
    if faulthandler.is_enabled():
        runtime.logger.info("faulthandler already enabled by the program; crash stacks go where it says")
        return
    path = os.path.join(runtime.crash_dir(), "faulthandler.txt")
    fh = runtime.open_private(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        faulthandler.enable(file=fh, all_threads=True)
    except Exception:
        fh.close()
        raise
    st.crash_file, st.crash_fh = path, fh
    _keep_crash_file(st)


def _keep_crash_file(st):
    """A later faulthandler.enable() to stderr (torchelastic's @record does
    it in every rank) would send the fatal stacks to the job's log and
    leave the crash file empty: the post-mortem loses the stack a rank died
    with. Such a call is kept on the crash file (said at info level); one
    with a file of the program's own choosing is obeyed.
    PROBING_CRASH_BACKTRACE=off leaves faulthandler alone."""
    import faulthandler

    real = faulthandler.enable
    if getattr(real, "__probing_mcp__", False):
        return

    def enable(*args, **kwargs):
        file = args[0] if args else kwargs.get("file")
        all_threads = args[1] if len(args) > 1 else kwargs.get("all_threads", True)
        fh = st.crash_fh
        to_stderr = file is None or file is sys.stderr or file is sys.__stderr__ or _fileno(file) == 2
        if to_stderr and fh is not None and not fh.closed and runtime.started():
            runtime.logger.info("faulthandler.enable() by the program: fatal-error stacks stay in %s "
                                "(PROBING_CRASH_BACKTRACE=off leaves them to stderr)", st.crash_file)
            return real(file=fh, all_threads=all_threads)
        return real(*args, **kwargs)

    enable.__probing_mcp__ = True
    enable.__wrapped__ = real
    enable.__doc__ = real.__doc__
    faulthandler.enable = enable


def _fileno(f):
    try:
        return f if isinstance(f, int) else f.fileno()
    except Exception:
        return -1


def _install_exits():
    from . import exits, identity

    path = exits.install()
    identity.update_identity(exceptions_file=path,
                             signal_files=dict((k, v[0]) for k, v in sorted(exits.st.signal_files.items())))
    return True


def _step(name, fn, *args):
    try:
        return fn(*args)
    except Exception as e:
        runtime.logger.warning("activation step %s failed: %r", name, e, exc_info=runtime.logger.isEnabledFor(10))
        return None


def _at_exit():
    st = runtime.state
    if st.pid != os.getpid():
        return
    try:
        server = sys.modules.get(__package__ + ".server")  # imported only if a client came
        if server is not None:
            server.close_all()
        from . import ctrl

        ctrl.close_unix()
    except Exception:
        pass
    # An empty crash file means no crash: leave nothing behind.
    try:
        if st.crash_file and os.path.getsize(st.crash_file) == 0:
            os.unlink(st.crash_file)
            os.rmdir(os.path.dirname(st.crash_file))
    except OSError:
        pass


def activate(mode="manual", beside_original=False):
    """Activates the agent in this process. Returns True when it is active
    (now or already), False when it stood aside or failed. Never raises.
    beside_original: activate even if the original Probing agent is active
    (PROBING_MCP_AGENT asked for this agent explicitly)."""
    try:
        st = runtime.state
        with st.lock:
            if runtime.started() or (st.activating and st.pid == os.getpid()):
                return True
            why = None if beside_original else original_probing_active()
            if why:
                st.stood_aside = why
                runtime.setup_logging((os.environ.get("PROBING_LOGLEVEL") or "warning"))
                runtime.logger.warning("%s; the probing-mcp agent stands aside", why)
                return False
            st.activating = True
            st.pid = os.getpid()
            st.activation_mode = mode
        try:
            _activate(st)
        finally:
            st.activating = False
        if mode in ("followed", "nested", "regex", "script"):  # the site hook: at start-up
            _step("torch import hook", _complete_on_torch_import)
            _step("delayed completion", _complete_later)
        else:
            complete()
        _step("control socket thread", serve_ctrl)
        return runtime.started()
    except Exception as e:
        try:
            runtime.logger.warning("activation failed: %r", e)
        except Exception:
            pass
        return False


def _activate(st):
    """Part 1 (module doc), in the caller."""
    env = os.environ
    try:
        runtime.setup_logging(_loglevel_validator(env.get("PROBING_LOGLEVEL") or "warning"))
    except ValueError:
        runtime.setup_logging("warning")
        runtime.logger.warning("PROBING_LOGLEVEL=%r is not debug/info/warning/error; using warning",
                               env.get("PROBING_LOGLEVEL"))
    ready_event.clear()
    st.data_dir = runtime._default_data_dir()
    st.eval_allowed, st.eval_tcp, st.eval_refusal = eval_policy(env)
    if st.eval_refusal and (env.get("PROBING_ALLOW_EVAL") or "").strip().lower() not in _OFF:
        runtime.logger.warning("%s", st.eval_refusal)
    st.auth_token = env.get("PROBING_AUTH_TOKEN") or ""
    st.auth_username = env.get("PROBING_AUTH_USERNAME") or "admin"
    # Before any process group exists: the Flight Recorder buffer default.
    _optional("frenv", "configure_env")
    _step("stack dump signal", _install_stack_dump, st)
    _step("crash backtrace", _install_crash_handler, st)
    from . import ctrl

    st.socket_path = _step("control socket", ctrl.start_unix) or ""
    if (env.get("PROBING_SERVER_ADDR") or "").strip() or (env.get("PROBING_PORT") or "").strip():
        from . import server  # TCP asked for: bound now, served as before

        st.tcp_address = _step("tcp listener", server.start_tcp) or ""
    from . import identity

    st.identity = None
    st.identity = _step("identity", identity.build)
    st.started = True
    _step("atexit", atexit.register, _at_exit)
    # Before the program's first line: an exception or exit at once is
    # recorded too. The Flight Recorder hook, chained later, goes under it.
    # It writes the identity file (with the records' paths), else:
    if not _step("exit records", _install_exits):
        _step("identity file", identity.write_identity)

    def _watch():
        try:
            identity.watch()
        except Exception:
            pass

    _step("identity watcher", lambda: threading.Thread(target=_watch, name="probing-mcp-identity",
                                                       daemon=True).start())
    # The node daemon (local rank 0 only; nodestart.py), from a daemon
    # thread of its own.
    _optional("nodestart", "start")


def _fr_hook_under_exits():
    """The Flight Recorder's excepthooks, chained under the exit records'
    (installed earlier, in part 1), so that ours runs first: the record is
    on disk before a snapshot (or anything else) can hang or kill us."""
    from . import exits, fr

    fr.install_watchdog_hook()
    if sys.excepthook is fr._sys_hook and fr._prev_sys[0] is exits._sys_hook:
        fr._prev_sys[0], exits.st.prev_sys_hook = exits.st.prev_sys_hook, fr._sys_hook
        sys.excepthook = exits._sys_hook
    if getattr(threading, "excepthook", None) is fr._thread_hook and fr._prev_thread[0] is exits._thread_hook:
        fr._prev_thread[0], exits.st.prev_thread_hook = exits.st.prev_thread_hook, fr._thread_hook
        threading.excepthook = exits._thread_hook


class _TorchFinder(object):
    """On sys.meta_path from activation: at the first import of torch it
    wakes the start-up's background part (the recorders' post-import hooks
    then watch torch.distributed and torch.optim, which torch imports after
    itself), and from then on it is inert.

    Python calls find_spec holding its global import lock, so this must
    not import, wait or take a lock that any thread could hold while
    importing: any of those deadlocks with a thread that holds a module
    lock and waits for the import lock (the node starter importing json,
    say). Setting an Event (its own lock, held for a notify) is all it does.
    It never removes itself from sys.meta_path: Python is iterating that
    list, and a removal would make it skip the next finder."""

    fired = False

    def find_spec(self, name, path=None, target=None):
        if not self.fired and (name == "torch" or name.startswith("torch.")):
            self.fired = True
            _kick.set()
        return None


def _complete_on_torch_import():
    if "torch" in sys.modules:
        _kick.set()
    elif not any(isinstance(f, _TorchFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchFinder())


# Wakes the background part before its delay (torch's import, a client,
# a recorder's first ring): runtime's, which tables.py sets.
_kick = runtime.complete_kick
# Guards only the test-and-set of st.completing: never held across an
# import or a call out of this module.
_run_lock = threading.Lock()

# A process that lives this long is worth completing before anyone asks:
# the first client (get_stacks of a job that just hung) must not pay for
# the imports, which on a loaded node can outlast its timeout and send it to
# the faulthandler fallback. Short-lived processes of a PROBING=2 tree exit
# before then and pay nothing; a torch rank completes at torch's import.
COMPLETE_AFTER_S = 1.0


def _complete_later():
    """The background part's thread: waits for a kick (torch's import, the
    first client, the first ring) or the delay, then completes. It is the
    one thread that imports on the agent's behalf at start-up, holding no
    lock of the agent's while it does."""
    v = (os.environ.get("PROBING_MCP_COMPLETE_AFTER") or "").strip()
    try:
        delay = float(v) if v else COMPLETE_AFTER_S
    except ValueError:
        delay = COMPLETE_AFTER_S
    if delay != delay:
        delay = COMPLETE_AFTER_S
    if delay < 0:
        delay = None  # negative: only when kicked

    def _run():
        _kick.wait(delay)
        complete()
        try:  # the first client's handover then finds the server loaded
            from . import server  # noqa: F401
        except Exception:
            pass

    threading.Thread(target=_run, name="probing-mcp-complete", daemon=True).start()


# Asks for the background part without waiting for it (runtime.py, where
# the recorders' tables call it too).
request_complete = runtime.request_complete


# How long the control socket's first client waits for the start-up's
# background part (it is answered anyway after that, with what is loaded).
COMPLETE_WAIT_S = 30.0


def serve_ctrl():
    """Serves the bound control socket (ctrl.py) from a thread of its own."""
    if runtime.state.unix_listener is not None:
        threading.Thread(target=serve_ctrl_here, name="probing-mcp-server", daemon=True).start()


def serve_ctrl_here():
    """Serves the bound control socket in this thread (activation's; its
    outermost frame is the agent's, which agent/gather.go runsAgentCode
    tells the job's threads from): waits for the first client, then hands
    the socket to server.py."""
    from . import ctrl

    got = ctrl.accept_first()
    if got is None:
        return
    s, path, ino, fd, addr = got
    try:
        # The config keys and recorders the endpoints show. This is an agent
        # thread: it may wait for the background part (bounded), which never
        # waits for it.
        request_complete()
        complete(timeout=COMPLETE_WAIT_S)
        from . import server

        server.adopt_unix(s, path, ino, fd, addr)
    except Exception as e:
        try:
            os.close(fd)
        except OSError:
            pass
        runtime.logger.warning("control socket %s not served: %r", path, e)


def complete(timeout=None):
    """Part 2 (module doc), once: run here by the first caller, while any
    other caller returns at once (or, with a timeout, waits up to that long
    for the first), so that no thread ever blocks on a thread that is
    importing while holding what it needs. Callers: the background thread,
    the control socket's first client (an agent thread), wait_ready(), and
    a manual activate(). Never raises. True when complete."""
    st = runtime.state
    if ready_event.is_set():
        return True
    if not runtime.started():
        return False
    with _run_lock:
        mine = not st.completing
        st.completing = True
    if not mine:
        if timeout:
            ready_event.wait(timeout)
        return ready_event.is_set()
    try:
        _complete(st)
    finally:
        st.completing = False
    return ready_event.is_set()


def _complete(st):
    try:
        _step("logging", runtime.real_logger)
        _step("config", _register_core_keys, st)
        from . import config

        _step("config env", config.load_env)
        try:
            runtime.set_log_level(config.get("probing.loglevel", "warning"))
        except Exception:
            pass
        _set_core_values(st)
        _optional("recorders", "start")
        if sys.modules.get(__package__ + ".exits") is not None:
            _step("flight recorder hook", _fr_hook_under_exits)
        else:
            _optional("fr", "install_watchdog_hook")
        st.ready = True
        runtime.logger.info("active (%s): socket %s%s, data dir %s", st.activation_mode, st.socket_path or "none",
                            (", tcp " + st.tcp_address) if st.tcp_address else "", st.data_dir)
    except Exception as e:
        try:
            runtime.logger.warning("activation failed: %r", e)
        except Exception:
            pass
    finally:
        ready_event.set()
