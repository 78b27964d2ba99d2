"""Python stacks of every thread, through sys._current_frames().

Two shapes:
  capture()    -> the agent's /apis/stacks object (agent/PROTOCOL.md)
  callstack()  -> Probing's pythonext/callstack list of {"PyFrame": {...}}

capture() also says, for a thread whose innermost frame is entering a lock
(``with lock:``, ``lock.acquire()``), which lock that is (lock_wait()): a
Python frame does not show the C call it is blocked in, so a deadlock would
otherwise read as a thread sitting on an ordinary line.

Both only read frame and code objects. Locals are summarised without calling
any user code (no repr() of arbitrary objects: a CUDA tensor's repr would
synchronise with a device that may be the very thing that hangs).
"""
import dis
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


_LOCK_TYPES = {type(threading.Lock()): "lock"}
try:
    import _thread

    _LOCK_TYPES[_thread.RLock] = "rlock"
except (ImportError, AttributeError):
    pass
_PY_RLOCK = getattr(threading, "_PyRLock", None)
_ENTER_OPS = ("BEFORE_WITH", "SETUP_WITH", "BEFORE_ASYNC_WITH", "SETUP_ASYNC_WITH")
_CALL_PREFIXES = ("CALL", "PRECALL")
_LOAD_NAME_OPS = ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF")
_ATTR_OPS = ("LOAD_ATTR", "LOAD_METHOD")
_instr_cache = {}  # code object -> list of instructions
_MAX_CACHE = 512


def _instructions(code):
    ins = _instr_cache.get(code)
    if ins is None:
        if len(_instr_cache) >= _MAX_CACHE:
            _instr_cache.clear()
        ins = _instr_cache[code] = list(dis.get_instructions(code))
    return ins


def _name_of(ins):
    """The name an instruction loads, or None."""
    op = ins.opname
    if op.startswith("LOAD_FAST") or op in _LOAD_NAME_OPS:
        v = ins.argval
        if isinstance(v, tuple):  # 3.13's LOAD_FAST_LOAD_FAST: the second is on top
            v = v[-1] if v else None
        return v if isinstance(v, str) else None
    return None


def _expr_before(ins, i):
    """The dotted name (["self", "lock"]) whose value instruction i-1 leaves
    on top of the stack, read backwards: LOAD_ATTR* after one name load."""
    attrs = []
    j = i - 1
    while j >= 0 and ins[j].opname in _ATTR_OPS:
        if not isinstance(ins[j].argval, str):
            return None
        attrs.append(ins[j].argval)
        j -= 1
    if j < 0:
        return None
    base = _name_of(ins[j])
    if base is None:
        return None
    attrs.reverse()
    return [base] + attrs


def _static_attr(obj, name):
    """obj's own attribute from its instance __dict__ only: no property,
    __getattr__ or other user code runs."""
    try:
        d = object.__getattribute__(obj, "__dict__")
    except Exception:
        return None, False
    if type(d) is not dict or name not in d:
        return None, False
    return d[name], True


def _resolve(frame, path):
    name = path[0]
    ok = False
    code = frame.f_code
    if name in code.co_varnames or name in code.co_cellvars or name in code.co_freevars:
        # A local: only then is f_locals read (before 3.13 it copies the
        # frame's fast locals into a dict; a global needs none of that).
        try:
            loc = frame.f_locals
            if name in loc:
                v, ok = loc[name], True
        except Exception:
            pass
        if not ok:
            return None  # an unbound local: no global of that name is meant
    if not ok:
        g = frame.f_globals
        if name in g:
            v, ok = g[name], True
        else:
            b = g.get("__builtins__")
            b = b if type(b) is dict else getattr(b, "__dict__", {})
            if name in b:
                v, ok = b[name], True
    if not ok:
        return None
    for a in path[1:]:
        v, ok = _static_attr(v, a)
        if not ok:
            return None
    return v


def _lock_facts(obj):
    """(the lock, kind, locked, owner ident or None) of a lock object (a
    Condition's own lock), else None. Only C methods and the C repr of the
    lock types are used."""
    kind = _LOCK_TYPES.get(type(obj))
    if kind == "lock":
        return obj, kind, bool(obj.locked()), None
    if kind == "rlock":
        r = repr(obj)  # "<locked _thread.RLock object owner=1399 count=1 at 0x…>"
        owner = None
        k = r.find("owner=")
        if k >= 0:
            digits = ""
            for c in r[k + 6:]:
                if not c.isdigit():
                    break
                digits += c
            owner = int(digits) if digits and digits != "0" else None
        return obj, kind, r.startswith("<locked"), owner
    if _PY_RLOCK is not None and type(obj) is _PY_RLOCK:
        owner, _ = _static_attr(obj, "_owner")
        return obj, "rlock", owner is not None, owner
    if type(obj) is threading.Condition:
        inner, ok = _static_attr(obj, "_lock")
        if ok and type(inner) is not threading.Condition:
            return _lock_facts(inner)
    return None


# threading's own waits on a lock that are not waits for a lock's holder:
# a condition's waiter lock (Event.wait, Queue.get, …) and join's.
_NOT_LOCK_WAITS = ("wait", "wait_for", "_wait_for_tstate_lock")
_THREADING_FILE = getattr(threading, "__file__", "") or ""


def lock_wait(frame):
    """{"lock": "self.lock", "kind": "lock"|"rlock", "lock_id", "locked",
    "owner"} when the frame's current instruction enters a lock: ``with
    x:`` or a call of ``x.acquire`` / ``x.__enter__``. None otherwise, and
    on any doubt (the bytecode differs across versions; a wrong answer is
    worse than none)."""
    try:
        code = frame.f_code
        if code.co_name in _NOT_LOCK_WAITS and code.co_filename == _THREADING_FILE:
            return None
        ins = _instructions(code)
        lasti = frame.f_lasti
        i = -1
        for k, x in enumerate(ins):
            if x.offset > lasti:
                break
            i = k
        if i < 0:
            return None
        op = ins[i].opname
        if op in _ENTER_OPS:
            path = _expr_before(ins, i)
        elif op.startswith(_CALL_PREFIXES):
            # Back to the method load of this call, past its arguments (a
            # few constants or names); another call or statement on the
            # way means the call is not an acquire.
            j = i - 1
            while j >= 0 and not (ins[j].opname in _ATTR_OPS and ins[j].argval in ("acquire", "__enter__")):
                o = ins[j].opname
                if i - j > 8 or not (o.startswith("LOAD_") or o in ("KW_NAMES", "PRECALL", "PUSH_NULL", "CACHE")):
                    return None
                j -= 1
            if j < 0:
                return None
            path = _expr_before(ins, j)
        else:
            return None
        if not path:
            return None
        obj = _resolve(frame, path)
        facts = _lock_facts(obj) if obj is not None else None
        if facts is None:
            return None
        lock, kind, locked, owner = facts
        return {"lock": ".".join(path), "kind": kind, "lock_id": id(lock), "locked": locked, "owner": owner}
    except Exception:
        return None


_with_cache = {}  # code object -> [(body start, body end, index of its BEFORE_WITH/SETUP_WITH)]
_MAX_HELD = 16
# Real opcodes only: 3.12+ lists pseudo-instructions (SETUP_WITH among
# them) in opmap with numbers past a byte, which never appear in co_code.
_WITH_OPCODES = [dis.opmap[n] for n in ("BEFORE_WITH", "BEFORE_ASYNC_WITH", "SETUP_WITH", "SETUP_ASYNC_WITH")
                 if n in dis.opmap and dis.opmap[n] < 256]


def _with_blocks(code):
    """The with statements of code and the bytecode range of each body.
    3.11+: the body is covered by the exception-table entries that lead to
    its cleanup handler (the first one starts right after BEFORE_WITH),
    their hull being the body, nested blocks included; 3.9-3.10:
    SETUP_WITH's own target ends it."""
    out = _with_cache.get(code)
    if out is not None:
        return out
    if len(_with_cache) >= _MAX_CACHE:
        _with_cache.clear()
    out = []
    ops = code.co_code[::2]  # opcodes at even offsets: a cheap test before any disassembly
    if not any(op in ops for op in _WITH_OPCODES):
        _with_cache[code] = out
        return out
    ins = _instructions(code)
    entries = getattr(dis.Bytecode(code), "exception_entries", None) if sys.version_info >= (3, 11) else None
    for k, x in enumerate(ins):
        if entries is not None and x.opname in ("BEFORE_WITH", "BEFORE_ASYNC_WITH"):
            after = [e for e in entries if x.offset < e.start <= x.offset + 8]
            if not after:
                continue
            target = min(after, key=lambda e: e.start).target
            body = [e for e in entries if e.target == target]
            out.append((min(e.start for e in body), max(e.end for e in body), k))
        elif entries is None and x.opname in ("SETUP_WITH", "SETUP_ASYNC_WITH") and isinstance(x.argval, int):
            out.append((x.offset + 2, x.argval, k))
    _with_cache[code] = out
    return out


def locks_held(frame):
    """The locks the thread holds through the with statements its frames
    are inside (innermost frame first): [{"lock", "kind", "lock_id"}].
    The lock is looked up by the name the with statement used, as that
    name reads now, and kept only if it is locked. Locks taken with
    acquire() outside a with are not seen."""
    out = []
    f = frame
    depth = 0
    while f is not None and depth < 256 and len(out) < _MAX_HELD:
        try:
            code, lasti = f.f_code, f.f_lasti
            if not (code.co_name in _NOT_LOCK_WAITS and code.co_filename == _THREADING_FILE):
                blocks = _with_blocks(code)
                if blocks:
                    ins = _instructions(code)
                    for start, end, k in blocks:
                        if start <= lasti < end:
                            path = _expr_before(ins, k)
                            obj = _resolve(f, path) if path else None
                            facts = _lock_facts(obj) if obj is not None else None
                            if facts is not None and facts[2]:
                                out.append({"lock": ".".join(path), "kind": facts[1], "lock_id": id(facts[0])})
        except Exception:
            pass  # this frame says nothing; the outer ones still may
        f = f.f_back
        depth += 1
    return out[:_MAX_HELD]


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
            fl, truncated, wait, held = [], False, None, []
            f = frames.get(ident)
            if f is not None:
                fl, truncated = _frames_of(f, max_frames)
                wait, held = lock_wait(f), locks_held(f)
            native = getattr(t, "native_id", None) if t is not None else None
            out.append({
                "id": ident,
                "native_id": native,
                "name": t.name if t is not None else "<thread %d>" % ident,
                "daemon": bool(t.daemon) if t is not None else False,
                "is_main": ident == main_ident,
                "frames": fl,
                "frames_truncated": truncated,
                "lock_wait": wait,
                "locks_held": held,
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
