"""Python stacks of every thread, through sys._current_frames().

Two shapes:
  capture()    -> the agent's /apis/stacks object (agent/PROTOCOL.md)
  callstack()  -> Probing's pythonext/callstack list of {"PyFrame": {...}}

Both only read frame and code objects. Locals are summarised without calling
any user code (no repr() of arbitrary objects: a CUDA tensor's repr would
synchronise with a device that may be the very thing that hangs).
"""
import os
import sys
import threading
import time

DEFAULT_MAX_FRAMES = 200
MAX_MAX_FRAMES = 100000
_MAX_LOCALS = 32
_MAX_VALUE = 200


class UnknownThread(LookupError):
    pass


def _frames_of(frame, max_frames):
    out = []
    f = frame
    while f is not None and len(out) < max_frames:
        code = f.f_code
        ln = f.f_lineno
        out.append({"file": code.co_filename, "line": ln if ln is not None else 0, "function": code.co_name})
        f = f.f_back
    return out, f is not None


def _thread_table():
    """ident -> Thread for every Python-level thread object."""
    try:
        return dict((t.ident, t) for t in threading.enumerate() if t.ident is not None)
    except Exception:
        return {}


def capture(max_frames=DEFAULT_MAX_FRAMES):
    """Every thread at once: {pid, captured_at_ns, gil_holder, threads}."""
    max_frames = max(1, min(int(max_frames), MAX_MAX_FRAMES))
    ts = time.time_ns()
    frames = sys._current_frames()
    table = _thread_table()
    main_ident = threading.main_thread().ident
    out = []
    try:
        for ident in set(frames) | set(table):
            t = table.get(ident)
            fl, truncated = [], False
            f = frames.get(ident)
            if f is not None:
                fl, truncated = _frames_of(f, max_frames)
            native = getattr(t, "native_id", None) if t is not None else None
            out.append({
                "id": ident,
                "native_id": native,
                "name": t.name if t is not None else "<thread %d>" % ident,
                "daemon": bool(t.daemon) if t is not None else False,
                "is_main": ident == main_ident,
                "frames": fl,
                "frames_truncated": truncated,
            })
    finally:
        del frames
    out.sort(key=lambda x: (not x["is_main"], x["name"], x["id"]))
    return {"pid": os.getpid(), "captured_at_ns": ts, "gil_holder": None, "threads": out}


def _summary(v):
    """Probing's local-variable object, built without running user code."""
    d = {"id": id(v), "class": type(v).__name__}
    try:
        tp = type(v)
        mod = getattr(tp, "__module__", "") or ""
        if v is None or tp in (bool, int, float, complex):
            d["value"] = repr(v)[:_MAX_VALUE]
        elif tp is str:
            d["value"] = repr(v[:_MAX_VALUE])
        elif tp in (bytes, bytearray):
            d["value"] = "<%d bytes>" % len(v)
        elif tp in (list, tuple, dict, set, frozenset):
            d["value"] = "len=%d" % len(v)
        elif mod.startswith("torch") or mod.startswith("numpy"):
            # Metadata only: shape, dtype and device never touch the data.
            shape = getattr(v, "shape", None)
            if shape is not None and not callable(shape):
                d["shape"] = str(list(shape))
            dt = getattr(v, "dtype", None)
            if dt is not None:
                d["dtype"] = str(dt)
            dev = getattr(v, "device", None)
            if dev is not None and not callable(dev):
                d["device"] = str(dev)
    except Exception:
        pass
    return d


def _locals_of(frame):
    out = {}
    try:
        code = frame.f_code
        if not code.co_flags & 0x2:  # CO_NEWLOCALS unset: module or class body
            return out
        names = code.co_varnames + code.co_cellvars + code.co_freevars
        loc = frame.f_locals
        for name in names:
            if len(out) >= _MAX_LOCALS:
                break
            if name.startswith("__") or name not in loc:
                continue
            out[name] = _summary(loc[name])
    except Exception:
        pass
    return out


def resolve_thread(tid):
    """A Python thread ident from tid (a Python ident or an OS native id);
    0 or None means the main thread."""
    main = threading.main_thread()
    if not tid:
        return main.ident
    tid = int(tid)
    frames = sys._current_frames()
    try:
        if tid in frames:
            return tid
    finally:
        del frames
    for t in threading.enumerate():
        if t.ident == tid or getattr(t, "native_id", None) == tid:
            return t.ident
    raise UnknownThread("unknown thread id %d" % tid)


def callstack(tid=None, with_locals=True, max_frames=DEFAULT_MAX_FRAMES):
    """[{"PyFrame": {"file","func","lineno","locals"}}], innermost first."""
    ident = resolve_thread(tid)
    max_frames = max(1, min(int(max_frames), MAX_MAX_FRAMES))
    frames = sys._current_frames()
    try:
        f = frames.get(ident)
    finally:
        del frames
    out = []
    while f is not None and len(out) < max_frames:
        ln = f.f_lineno
        out.append({"PyFrame": {
            "file": f.f_code.co_filename,
            "func": f.f_code.co_name,
            "lineno": ln if ln is not None else 0,
            "locals": _locals_of(f) if with_locals else {},
        }})
        f = f.f_back
    return out
