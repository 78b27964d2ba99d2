"""The agent's ring tables: the rings of python.<table> and the writes into them.

Every table is a MEMT v5 ring (memt.py) named ``python.<table>`` under
``runtime.pid_dir()`` (= ``<data dir>/<pid>/``), created lazily on its first
row, with a leading ``timestamp`` I64 column (µs since the epoch) as
Probing's Python ``@table`` rings have: the time the row was recorded (for
comm_collective, when the call was entered; for queued rows not the later
moment the flusher wrote them). The fixed schemas and the ring sizes are
declared in schemas.py; any other table gets its dtypes from its first row
(contract §4.9).

API for the rest of the agent: ``append(table, dict)`` / ``append_many``
(synchronous), ``defer(table, values)`` / ``defer_call(fn, arg)`` (queued for
the flusher thread, see "deferred writes" below), ``flush()`` (write the
queue now; call it before reading the rings in-process), ``stats()``,
``identity_fields()`` (a row's rank, world size and role),
``when_imported(module, callback)`` (importhooks.py), ``warn_once`` and
``log`` (oncelog.py). recorders.py starts and stops the recorders that
call them (``begin()`` / ``end()`` here); this module imports none of them.

Nothing here may break the training process: every public entry point
catches its exceptions and logs them (once per kind) through the
"probing_mcp_agent" logger. After os.fork() the child records nothing (its
parent's writers are abandoned, not touched): activation is per process.
"""

import atexit
import collections
import os
import sys
import threading
import time

from . import identity, memt, runtime
from .oncelog import log, warn_once  # noqa: F401  (tables.log, tables.warn_once: the recorders' names)
from .schemas import DEFAULT_CAPACITY, SCHEMAS  # noqa: F401  (tables.SCHEMAS)

I64 = memt.I64

# -- state -------------------------------------------------------------------

_lock = threading.RLock()
_rings = {}          # table -> Ring
_failed = {}         # table -> monotonic time of the last failed creation
_enabled = True      # False in a forked child, or after stop()
_started = False

RETRY_SECS = 30.0


def now_us():
    return time.time_ns() // 1000


class Ring(object):
    """One table: its writer, column names and per-column defaults."""

    __slots__ = ("table", "writer", "names", "index", "defaults", "dtypes", "appended", "dropped")

    def __init__(self, table, writer, defaults):
        self.table = table
        self.writer = writer
        self.names = [n for n, _ in writer.columns]
        self.index = dict((n, i) for i, n in enumerate(self.names))
        self.dtypes = list(writer.dtypes)
        self.defaults = defaults
        self.appended = 0
        self.dropped = 0

    def append_batch(self, rows):
        """Append many value rows; returns the per-row results of
        memt.Writer.append_batch."""
        res = self.writer.append_batch(rows)
        for st in res:
            if st[0] == memt.OK:
                self.appended += 1
            else:
                self._drop(st[0])
        return res

    def append_values(self, values):
        st = self.writer.append(values)
        if st == memt.OK:
            self.appended += 1
        else:
            self._drop(st)
        return st

    def _drop(self, st):
        self.dropped += 1
        if st == memt.ROW_TOO_LARGE:
            warn_once(("too_large", self.table), "python.%s: a row larger than a ring chunk was dropped", self.table)
        elif st == memt.READERS_PINNED:
            warn_once(("pinned", self.table), "python.%s: a reader lease pins the next chunk; rows dropped", self.table)

    def row_from_dict(self, row):
        vals = list(self.defaults)
        idx = self.index
        for k, v in row.items():
            i = idx.get(k)
            if i is not None and v is not None:
                vals[i] = v
        if self.names[0] == "timestamp" and not row.get("timestamp"):
            vals[0] = now_us()
        return vals


def _path(table):
    if runtime.state.started and not runtime.state.ready:
        # The first ring of an activated process: the start-up's background
        # part is woken (the recorders' config keys, PROBING_SAMPLE_RATE and
        # the rest, apply once it ran). Only woken: this may run on the
        # program's thread, under a recorder's lock, where the agent never
        # imports or waits (activation.complete).
        runtime.request_complete()
    return os.path.join(runtime.pid_dir(), "python." + table)


def _capacity(table):
    return memt.capacity_for(table, default=DEFAULT_CAPACITY.get(table))


def _create(table, columns, defaults, dedup=False):
    path = _path(table)
    chunk, n = memt.size_for(_capacity(table))
    try:
        w = memt.Writer(path, columns, chunk, n, dedup=dedup)
    except FileExistsError:
        # A file left by a dead process whose pid we reuse, or an earlier
        # incarnation of this table: replace it unless a writer holds it.
        if not memt.replace_stale(path):
            raise
        w = memt.Writer(path, columns, chunk, n, dedup=dedup)
    return Ring(table, w, defaults)


def ring(table, first_row=None):
    """The Ring of ``table`` (created on first use), or None when it cannot
    exist (agent disabled, or creation failed within the last 30 s)."""
    r = _rings.get(table)
    if r is not None:
        return r
    if not _enabled:
        return None
    with _lock:
        r = _rings.get(table)
        if r is not None or not _enabled:
            return r
        t = _failed.get(table)
        if t is not None and time.monotonic() - t < RETRY_SECS:
            return None
        try:
            schema = SCHEMAS.get(table)
            if schema is not None:
                cols = [(n, d) for n, d, _ in schema]
                defaults = [v for _, _, v in schema]
            elif first_row is not None:
                cols, defaults = infer_schema(first_row)
            else:
                return None
            r = _create(table, cols, defaults)
        except Exception as e:
            _failed[table] = time.monotonic()
            warn_once(("create", table), "cannot create ring python.%s: %s", table, e)
            return None
        _rings[table] = r
        return r


def infer_schema(row):
    """Columns and defaults of a table from its first row (dict): a leading
    timestamp I64, then the row's keys in order with dtypes per §4.9."""
    cols, defaults = [("timestamp", I64)], [0]
    for k, v in row.items():
        if k == "timestamp":
            continue
        d = memt.infer_dtype(k, v)
        cols.append((k, d))
        defaults.append("" if d in (memt.STR, memt.BYTES) else (0.0 if d in (memt.F64, memt.F32) else 0))
    return cols, defaults


def append(table, row):
    """Append a row (a dict; missing columns take the table's defaults, the
    timestamp is filled in) to python.<table>. Returns True if written.
    Never raises."""
    try:
        r = _rings.get(table) or ring(table, row)
        if r is None:
            return False
        return r.append_values(r.row_from_dict(row)) == memt.OK
    except Exception as e:
        warn_once(("append", table), "python.%s: append failed: %s", table, e)
        return False


def append_many(table, rows):
    """Append dict rows; returns how many were written. Never raises."""
    n = 0
    try:
        r = None
        for row in rows:
            if r is None:
                r = _rings.get(table) or ring(table, row)
                if r is None:
                    return 0
            if r.append_values(r.row_from_dict(row)) == memt.OK:
                n += 1
    except Exception as e:
        warn_once(("append", table), "python.%s: append failed: %s", table, e)
    return n


def stats():
    """{table: {path, appended, dropped, counters...}} of the open rings."""
    out = {"queue": queue_stats()}
    with _lock:
        for t, r in list(_rings.items()):
            try:
                d = dict(r.writer.counters())
            except Exception:
                d = {}
            d.update({"path": r.writer.path, "appended": r.appended, "dropped": r.dropped,
                      "chunk_size": r.writer.chunk_size, "num_chunks": r.writer.num_chunks})
            out["python." + t] = d
    return out


def close_all():
    """Close every writer (files stay). Rings are recreated on next use
    under a new instance id only if the agent is re-enabled."""
    with _lock:
        for r in list(_rings.values()):
            try:
                r.writer.close()
            except Exception:
                pass
        _rings.clear()


# -- deferred writes -----------------------------------------------------------
# The recorders on the training path (collectives, step hook, spans) do not
# write the ring themselves: they queue (fn, arg) and a daemon thread calls
# fn(arg) for the queued items every FLUSH_INTERVAL seconds (sooner when
# KICK items are waiting), writing rows in batches. Encoding and writing a
# row costs ~2.5 µs in a tight loop but 5-10x more inside a training step,
# where caches and TLB are cold after compute (much more on small VMs), so
# the training thread only appends a short list to a deque (~1.5 µs warm),
# and the flusher pays the per-flush warm-up once per batch, while the
# training thread computes or waits in communication with the GIL released.
# Rows reach the ring at most ~FLUSH_INTERVAL after the call; flush()
# forces it (FR snapshots and the watchdog hook call it; so does atexit).
# At most QUEUE_MAX items wait; more are dropped and counted.

FLUSH_INTERVAL = 0.5
KICK = 4096
QUEUE_MAX = 1 << 16

_queue = collections.deque()
_qdropped = [0]
# time.time() - time.perf_counter(): the flusher turns perf_counter stamps
# taken on the training path (one cheap clock read) into epoch time.
epoch_offset = [time.time() - time.perf_counter()]
_flusher = [None]
_flush_ev = threading.Event()
_flush_lock = threading.Lock()


def _write_plain(arg):
    table, values = arg
    r = _rings.get(table) or ring(table)
    if r is not None:
        r.append_values(values)


def _write_plain_batch(args):
    by_table = {}
    for table, values in args:
        by_table.setdefault(table, []).append(values)
    for table, rows in by_table.items():
        r = _rings.get(table) or ring(table)
        if r is not None:
            r.append_batch(rows)


_write_plain.batch = _write_plain_batch


def defer(table, values):
    """Queue a row (values in schema order, timestamp included)."""
    defer_call(_write_plain, (table, values))


def defer_call(fn, arg):
    """Queue fn(arg) for the flusher thread (fn writes rows)."""
    q = _queue
    n = len(q)
    if n >= QUEUE_MAX or not _enabled:
        _qdropped[0] += 1
        return
    q.append((fn, arg))
    if _flusher[0] is None:
        _start_flusher()
    elif n == KICK:
        _flush_ev.set()


def flush(timeout=None):
    """Write every queued row now (from the calling thread). Returns the
    number of items written; 0 if another flush holds the lock past
    ``timeout`` seconds (None: wait)."""
    if timeout is None:
        _flush_lock.acquire()
    elif not _flush_lock.acquire(True, timeout):
        return 0
    n = 0
    try:
        q = _queue
        pop = q.popleft
        while q:
            # take what is queued now, then write it grouped by writer
            # function (a function with a .batch attribute gets the whole
            # group in one call), keeping the queue order within a group
            items = []
            while q and len(items) < 8192:
                try:
                    items.append(pop())
                except IndexError:
                    break
            groups = {}
            order = []
            for fn, arg in items:
                g = groups.get(fn)
                if g is None:
                    g = groups[fn] = []
                    order.append(fn)
                g.append(arg)
            for fn in order:
                args = groups[fn]
                try:
                    b = getattr(fn, "batch", None)
                    if b is not None:
                        b(args)
                    else:
                        for a in args:
                            fn(a)
                except Exception as e:
                    warn_once(("flush", getattr(fn, "__name__", "")), "writing queued rows failed: %s", e)
            n += len(items)
    finally:
        _flush_lock.release()
    return n


flusher_cpu = [0.0, 0, 0]  # flusher thread CPU seconds spent writing, flushes, items written


def set_flush_interval(value):
    global FLUSH_INTERVAL
    FLUSH_INTERVAL = _interval(value)


def _interval(v):
    f = float(str(v).strip())
    if not (0.01 <= f <= 60.0):
        raise ValueError("accepted values are seconds from 0.01 to 60")
    return f


def _flusher_main():
    cpu = getattr(time, "thread_time", time.process_time)
    while True:
        ev = _flush_ev
        try:
            ev.wait(FLUSH_INTERVAL)
            ev.clear()
            if _queue:
                epoch_offset[0] = time.time() - time.perf_counter()
                c0 = cpu()
                n = flush(timeout=1.0)
                flusher_cpu[0] += cpu() - c0
                flusher_cpu[1] += 1
                flusher_cpu[2] += n
        except Exception as e:  # never die
            warn_once("flusher", "ring flusher: %s", e)
            time.sleep(FLUSH_INTERVAL)


def _start_flusher():
    with _lock:
        if _flusher[0] is not None or not _enabled:
            return
        t = threading.Thread(target=_flusher_main, name="probing-mcp-flusher", daemon=True)
        _flusher[0] = t
        t.start()


def queue_stats():
    return {"queued": len(_queue), "dropped": _qdropped[0],
            "flusher": bool(_flusher[0] is not None and _flusher[0].is_alive()),
            "flusher_cpu_s": flusher_cpu[0], "flushes": flusher_cpu[1], "flushed_items": flusher_cpu[2]}


def _atexit_flush():
    try:
        if _queue and _enabled:
            flush(timeout=2.0)
    except Exception:
        pass


atexit.register(_atexit_flush)


# -- identity (rank, world size, role) ---------------------------------------

_ident = [-1, -1, "", 0.0]  # rank, world_size, role, next refresh (monotonic)


def identity_fields():
    """(rank, world_size, role), cached; refreshed every 5 s and at once
    while the rank is unknown but torch.distributed is initialized."""
    c = _ident
    now = time.monotonic()
    if now < c[3] and (c[0] >= 0 or not _dist_initialized()):
        return c[0], c[1], c[2]
    rank, ws, role = -1, -1, ""
    try:
        idn = identity.current()
        rank, ws, role = int(idn.get("rank", -1)), int(idn.get("world_size", -1)), str(idn.get("role") or "")
    except Exception:
        pass
    d = sys.modules.get("torch.distributed")
    if d is not None:
        try:
            if d.is_available() and d.is_initialized():
                rank, ws = d.get_rank(), d.get_world_size()
        except Exception:
            pass
    c[0], c[1], c[2], c[3] = rank, ws, role, now + 5.0
    return rank, ws, role


def _dist_initialized():
    d = sys.modules.get("torch.distributed")
    if d is None:
        return False
    try:
        return bool(d.is_initialized())
    except Exception:
        return False


def invalidate_identity():
    _ident[3] = 0.0


# -- post-import hooks: importhooks.py (re-exported for the recorders) --------

from .importhooks import _finder, when_imported  # noqa: E402,F401


def begin():
    """Marks the tables started and enabled (recorders.start()); False if
    they already were."""
    global _started, _enabled
    with _lock:
        if _started:
            return False
        _started = True
        _enabled = True
    return True


def end():
    """Writes the queued rows, then records nothing more (recorders.stop()
    then closes the rings)."""
    global _enabled, _started
    try:
        flush(timeout=2.0)
    except Exception:
        pass
    _enabled = False
    _started = False


def enabled():
    return _enabled


def _after_fork_in_child():
    global _lock, _watch_lock, _enabled, _started, _flush_lock, _flush_ev
    _lock = threading.RLock()
    _watch_lock = threading.RLock()
    _flush_lock = threading.Lock()
    _flush_ev = threading.Event()
    _flusher[0] = None
    _queue.clear()
    for r in list(_rings.values()):
        try:
            r.writer.abandon()
        except Exception:
            pass
    _rings.clear()
    _enabled = False
    _started = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
