"""Why this process ended, written where it outlives the process.

<pid dir>/.exceptions.jsonl: one JSON object a line (agent/PROTOCOL.md):
  kind "exception"         an uncaught exception (sys.excepthook in the main
                           thread, threading.excepthook in the others)
  kind "main_thread_exit"  the main thread is done but non-daemon threads
                           keep the process alive (threading._shutdown waits
                           on them): what the main thread ended with and who
                           is still running
  kind "exit"              the interpreter's exit (atexit): code and where
                           the code came from
Each record is one os.write on an O_APPEND descriptor followed by fsync, in
the hook itself, before the previous hook runs: a kill -9 (or a hang in
the previous hook) right after loses nothing. A file, not a MEMT ring: a
ring recycles its oldest rows and is written by the flusher thread later,
and the Go side needs the cause after death, with no writer, without SQL.

SIGTERM and SIGINT: faulthandler.register(chain=True) writes the stack of
the thread that received the signal (Linux picks the main thread when it
does not block it) to <pid dir>/.signal.<NAME>.txt from the C signal
handler (no GIL), then re-raises the signal to the previous handler. Not
all threads: reading the frames of threads that run meanwhile crashed the
process (SIGSEGV instead of SIGTERM) in about 3% of tries; one's own
interrupted thread is what faulthandler is built to read. A Python
handler would change the program: SIG_DFL would wait for the main thread
to come back to the interpreter, which a rank stuck in NCCL never does.
With chaining, the default action still kills the process by the signal,
and a Python handler (KeyboardInterrupt, the program's) still runs.

Bounds: messages 4 KiB, 64 frames (innermost), 8 chained exceptions, 64
thread names, 256 exception records and 4 MiB per file; "exit" and
"main_thread_exit" are always written (one each).
"""
import _signal as signal  # the C module: signal.py's enums cost every start
import collections
import os
import sys
import threading
import time

from . import runtime

EXCEPTIONS_FILE = ".exceptions.jsonl"
SIGNAL_FILE = ".signal.%s.txt"  # % "SIGTERM"
FORMAT_VERSION = 1
MAX_MESSAGE = 4096
MAX_CHAIN_MESSAGE = 512
MAX_FRAMES = 64
MAX_CHAIN = 8
MAX_THREADS = 64
MAX_EXCEPTION_RECORDS = 256
MAX_FILE_BYTES = 4 << 20
SIGNALS = ("SIGTERM", "SIGINT")


class _State(object):
    def __init__(self):
        self.lock = threading.RLock()  # RLock: a Python signal handler may run inside a write
        self.reset()

    def reset(self):
        self.pid = None
        self.path = ""
        self.fh = None
        self.written = 0
        self.exceptions = 0
        self.dropped = 0
        self.exit_request = None  # [status] once the main thread called sys.exit
        self.main_exception = None  # {"type","message"} of the main thread's uncaught exception
        self.main_exit_written = False
        self.exit_written = False
        self.signal_files = {}  # name -> (path, file, Python-level handler when registered)
        self.start_time = 0
        self.prev_sys_hook = None
        self.prev_thread_hook = None
        self.prev_shutdown = None
        self.prev_exit = None


st = _State()


def _qualname(t):
    try:
        mod = getattr(t, "__module__", "") or ""
        name = getattr(t, "__qualname__", None) or getattr(t, "__name__", None) or repr(t)
        return name if mod in ("builtins", "") else "%s.%s" % (mod, name)
    except Exception:
        return "?"


def _text(v, limit):
    """(str(v) cut to limit characters, whether it was cut). Never raises."""
    try:
        s = str(v)
    except BaseException as e:
        s = "<str() failed: %s>" % type(e).__name__
    if len(s) > limit:
        return s[:limit], True
    return s, False


def _frames(tb):
    """Innermost first (as /apis/stacks), the innermost MAX_FRAMES kept."""
    keep = collections.deque(maxlen=MAX_FRAMES)
    total = 0
    while tb is not None and total < 1 << 20:
        try:
            code = tb.tb_frame.f_code
            keep.append({"file": code.co_filename, "line": int(tb.tb_lineno or 0), "function": code.co_name})
        except Exception:
            keep.append({"file": "?", "line": 0, "function": "?"})
        total += 1
        tb = tb.tb_next
    out = list(keep)
    out.reverse()
    return out, total


def _chain(exc):
    out = []
    seen = set([id(exc)])
    while exc is not None and len(out) < MAX_CHAIN:
        nxt, rel = exc.__cause__, "cause"
        if nxt is None and not exc.__suppress_context__:
            nxt, rel = exc.__context__, "context"
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(nxt))
        msg, cut = _text(nxt, MAX_CHAIN_MESSAGE)
        out.append({"relation": rel, "type": _qualname(type(nxt)), "message": msg, "message_truncated": cut})
        exc = nxt
    return out


def _thread_info(t):
    if t is None:
        return {"name": "", "ident": 0, "native_id": 0, "daemon": False, "is_main": False}
    return {"name": str(t.name), "ident": int(t.ident or 0), "native_id": int(getattr(t, "native_id", 0) or 0),
            "daemon": bool(t.daemon), "is_main": t is threading.main_thread()}


def exception_record(etype, value, tb, thread, hook):
    msg, cut = _text(value, MAX_MESSAGE)
    frames, total = _frames(tb)
    return {"v": FORMAT_VERSION, "kind": "exception", "time_ns": time.time_ns(), "pid": os.getpid(),
            "start_time": st.start_time, "hook": hook, "thread": _thread_info(thread), "type": _qualname(etype), "message": msg,
            "message_truncated": cut, "frames": frames, "frames_total": total,
            "frames_truncated": total > len(frames),
            "chain": _chain(value) if isinstance(value, BaseException) else []}


def write(rec, always=False):
    """Appends rec as one line, fsync'd. always: past the record and byte
    bounds too (the exit and main-thread records). Returns True if written."""
    with st.lock:
        if st.fh is None or st.pid != os.getpid():
            return False
        if not always and (st.exceptions >= MAX_EXCEPTION_RECORDS or st.written >= MAX_FILE_BYTES):
            st.dropped += 1
            return False
        try:
            line = (runtime.dumps(rec) + "\n").encode("utf-8", "replace")
            fd = st.fh.fileno()
            n = 0
            while n < len(line):  # one write() for any sane record; the loop covers a short write
                n += os.write(fd, line[n:])
            st.written += n
            if rec.get("kind") == "exception":
                st.exceptions += 1
            try:
                os.fsync(fd)
            except OSError:
                pass
            return True
        except Exception as e:
            runtime.logger.debug("exits: cannot write %s: %r", st.path, e)
            return False


def _record_exception(etype, value, tb, thread, hook):
    if etype is None or (isinstance(etype, type) and issubclass(etype, SystemExit)):
        return  # the default hooks ignore SystemExit too
    rec = exception_record(etype, value, tb, thread, hook)
    if thread is threading.main_thread() or (thread is None and hook == "sys.excepthook"):
        st.main_exception = {"type": rec["type"], "message": rec["message"][:MAX_CHAIN_MESSAGE]}
    write(rec)


def _sys_hook(etype, value, tb):
    try:
        _record_exception(etype, value, tb, threading.current_thread(), "sys.excepthook")
    except BaseException:
        pass
    prev = st.prev_sys_hook or sys.__excepthook__
    prev(etype, value, tb)


def _thread_hook(args):
    try:
        _record_exception(args.exc_type, args.exc_value, args.exc_traceback, args.thread, "threading.excepthook")
    except BaseException:
        pass
    prev = st.prev_thread_hook or threading.__excepthook__
    prev(args)


def _exit_code(status):
    """What the interpreter makes of SystemExit(status): None is 0, an int is
    itself, anything else is printed and gives 1."""
    if status is None:
        return 0
    if isinstance(status, int) and not isinstance(status, bool):
        return status
    return 1


def _sys_exit(status=None):
    try:
        if threading.current_thread() is threading.main_thread():
            st.exit_request = [status]
    except BaseException:
        pass
    return st.prev_exit(status)


def _main_outcome():
    if st.main_exception is not None:
        return "exception"
    if st.exit_request is not None:
        return "sys.exit"
    return "return"


def record_main_thread_exit():
    """The main_thread_exit record, if non-daemon threads outlive the main
    thread (the process lives on in threading._shutdown). Once."""
    if st.main_exit_written:
        return False
    main = threading.main_thread()
    alive = [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]
    if not alive:
        return False
    st.main_exit_written = True
    rec = {"v": FORMAT_VERSION, "kind": "main_thread_exit", "time_ns": time.time_ns(), "pid": os.getpid(),
           "start_time": st.start_time, "outcome": _main_outcome(), "exception": st.main_exception,
           "exit_code": _exit_code(st.exit_request[0]) if st.exit_request is not None else None,
           "threads_alive": [_thread_info(t) for t in alive[:MAX_THREADS]], "threads_alive_total": len(alive)}
    return write(rec, always=True)


def _shutdown():
    try:
        record_main_thread_exit()
    except BaseException:
        pass
    return st.prev_shutdown()


def _signals_received():
    out = []
    for name, (path, _, _) in sorted(st.signal_files.items()):
        try:
            if os.path.getsize(path) > 0:
                out.append(name)
        except OSError:
            pass
    return out


def exit_record():
    rec = {"v": FORMAT_VERSION, "kind": "exit", "time_ns": time.time_ns(), "pid": os.getpid(),
           "start_time": st.start_time, "how": "atexit",
           "code": 0, "code_source": "assumed", "signal": None, "signals_received": _signals_received(),
           "exceptions_recorded": st.exceptions, "exceptions_dropped": st.dropped}
    exc = st.main_exception
    if exc is not None:
        if exc.get("type") == "KeyboardInterrupt":
            # CPython ends by SIGINT (SIG_DFL) after an uncaught KeyboardInterrupt.
            rec["code"], rec["signal"], rec["code_source"] = None, int(signal.SIGINT), "uncaught_exception"
        else:
            rec["code"], rec["code_source"] = 1, "uncaught_exception"
    elif st.exit_request is not None:
        rec["code"], rec["code_source"] = _exit_code(st.exit_request[0]), "sys.exit"
    crash = runtime.state.crash_file
    if crash:
        rec["crash_file"] = crash
    return rec


def _at_exit():
    if st.pid != os.getpid() or st.exit_written:
        return
    st.exit_written = True
    try:
        write(exit_record(), always=True)
    except BaseException:
        pass
    _remove_empty_signal_files()


def _unregister(name, handler):
    """Gives the signal back to the handler it had, unless the program has
    set another since (signal.signal replaced faulthandler's: unregistering
    would put back the old one over the program's). True if given back."""
    import faulthandler

    num = int(getattr(signal, name))
    if signal.getsignal(num) is not handler:
        return False
    faulthandler.unregister(num)
    return True


def _remove_empty_signal_files():
    for name, (path, fh, handler) in list(st.signal_files.items()):
        try:
            if os.path.getsize(path) == 0 and _unregister(name, handler):
                os.unlink(path)
                fh.close()  # only now: faulthandler writes to the descriptor number
                del st.signal_files[name]
        except (OSError, ValueError):
            pass


def _install_signal_files(d):
    import faulthandler

    for name in SIGNALS:
        num = getattr(signal, name, None)
        if num is None:
            continue
        try:
            h = signal.getsignal(num)
        except (ValueError, OSError):
            continue
        if h == signal.SIG_IGN:
            continue  # the program ignores it: nothing will end the process by it
        path = os.path.join(d, SIGNAL_FILE % name)
        fh = runtime.open_private(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            faulthandler.register(int(num), file=fh, all_threads=False, chain=True)
        except Exception as e:
            fh.close()
            runtime.logger.debug("exits: no %s file: %r", name, e)
            try:
                os.unlink(path)
            except OSError:
                pass
            continue
        st.signal_files[name] = (path, fh, h)


def install():
    """Opens the file and chains the hooks (idempotent per process)."""
    import atexit

    from . import identity  # never under the lock

    with st.lock:
        if st.pid == os.getpid() and st.fh is not None:
            return st.path
        st.reset()
        d = runtime.pid_dir()
        st.path = os.path.join(d, EXCEPTIONS_FILE)
        st.fh = runtime.open_private(st.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        st.pid = os.getpid()
        # With the pid, it tells this process's records from those of an
        # earlier process that had the pid (the file is appended to).
        st.start_time = identity.start_time()
        try:
            st.written = os.fstat(st.fh.fileno()).st_size
        except OSError:
            pass
        st.prev_sys_hook = sys.excepthook
        sys.excepthook = _sys_hook
        if hasattr(threading, "excepthook"):
            st.prev_thread_hook = threading.excepthook
            threading.excepthook = _thread_hook
        if callable(getattr(threading, "_shutdown", None)):
            st.prev_shutdown = threading._shutdown
            threading._shutdown = _shutdown
        st.prev_exit = sys.exit
        sys.exit = _sys_exit
        try:
            _install_signal_files(d)
        except Exception as e:
            runtime.logger.warning("exits: signal files not installed: %r", e)
        atexit.register(_at_exit)
        return st.path


def _after_fork_in_child():
    # A forked child is not an agent (runtime._after_fork_in_child): it must
    # not write into the parent's files. The hooks stay and pass through;
    # the signal handlers go, so SIGTERM and SIGINT act as without the agent.
    st.pid = None
    try:
        for name, (_, _, handler) in list(st.signal_files.items()):
            _unregister(name, handler)
        st.signal_files = {}
    except Exception:
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
