"""python.comm_collective: one row per torch.distributed collective call.

When torch.distributed is imported (now, or later: tables.when_imported
watches that one module name), the public collectives are replaced, in
both ``torch.distributed`` and ``torch.distributed.distributed_c10d``, by
thin wrappers:

  all_reduce broadcast all_gather all_gather_into_tensor reduce_scatter
  reduce_scatter_tensor all_to_all all_to_all_single barrier reduce gather
  scatter send recv isend irecv batch_isend_irecv

(``init_process_group`` and ``destroy_process_group`` are wrapped too,
only to drop cached group information.)
Code that bound an original with ``from torch.distributed import x``
*before* the patch keeps calling the original and is not recorded.

Row (contract §3.2 plus one trailing extension column):
  timestamp (µs, when the call was entered), micro_step, local_step,
  global_step, micro_batches (steptiming.STEP), rank, world_size (global),
  role, op, group_rank, group_size, participate_ranks (JSON list of the
  group's global ranks, "" if unknown), tensor_shape ("(4, 3)"; a list of
  tensors gives "[(4, 3), (4, 3)]"), tensor_dtype ("torch.float32"),
  bytes (the tensor, or the sum over a list), duration_ms, async_op (0/1),
  group_seq (EXTENSION: 1-based count of wrapped calls this process made on
  that process group, counting every call even when sampling skips its
  row; equal across members that issued the same calls, so the member with
  the lowest max(group_seq) is the one that stopped issuing them), peer
  (EXTENSION: for send/isend the global rank sent to, for recv/irecv the
  one received from, -1 for collectives and for a receive from any rank).
  A point-to-point call does not count on its group's group_seq (only some
  members make it, so the others' counts would drift apart); its group_seq
  counts this process's calls in that direction with that peer on that
  group: the k-th send from A to B is matched by B's k-th receive from A.
  batch_isend_irecv writes one row per operation in its list, named isend
  or irecv.

The wrapper itself only queues a small list (tables.defer_call); the
flusher thread encodes and writes it, normally after the call returned,
with its duration. A call still running when the flusher writes it (a rank
stuck in a collective, or just a long one) gets duration_ms = -1 in the
ring, patched in place (one 8-byte store, only if the chunk was not
recycled meanwhile) when the call returns or raises. So a hung rank's last
row is the collective it is stuck in, with duration_ms = -1, visible
within ~0.5 s (tables.FLUSH_INTERVAL). ``timestamp`` is when the call was
entered. duration_ms is the Python wall time of the call: for
async_op=True (and isend/irecv/batch_isend_irecv) only the launch.

probing.comm.collectives (on/off) and probing.sample_rate (0..1) are read
from module globals that config updates: a disabled wrapper costs one
global lookup and a call.
"""

import os
import random
import sys
import threading
import time

from . import steptiming, tables

OPS = {
    # op: name of the argument that carries the communicated tensor(s)
    "all_reduce": "tensor",
    "broadcast": "tensor",
    "all_gather": "tensor",
    "all_gather_into_tensor": "input_tensor",
    "reduce_scatter": "input_list",
    "reduce_scatter_tensor": "input",
    "all_to_all": "input_tensor_list",
    "all_to_all_single": "input",
    "barrier": None,
    "reduce": "tensor",
    "gather": "tensor",
    "scatter": "tensor",
    "send": "tensor",
    "recv": "tensor",
    "isend": "tensor",
    "irecv": "tensor",
    "batch_isend_irecv": "p2p_op_list",
}
_ALWAYS_ASYNC = ("isend", "irecv", "batch_isend_irecv")
# The positions torch 2.x uses, for when a signature cannot be read.
_FALLBACK_PARAMS = {
    "all_reduce": ("tensor", "op", "group", "async_op"),
    "broadcast": ("tensor", "src", "group", "async_op"),
    "all_gather": ("tensor_list", "tensor", "group", "async_op"),
    "all_gather_into_tensor": ("output_tensor", "input_tensor", "group", "async_op"),
    "reduce_scatter": ("output", "input_list", "op", "group", "async_op"),
    "reduce_scatter_tensor": ("output", "input", "op", "group", "async_op"),
    "all_to_all": ("output_tensor_list", "input_tensor_list", "group", "async_op"),
    "all_to_all_single": ("output", "input", "output_split_sizes", "input_split_sizes", "group", "async_op"),
    "barrier": ("group", "async_op", "device_ids"),
    "reduce": ("tensor", "dst", "op", "group", "async_op"),
    "gather": ("tensor", "gather_list", "dst", "group", "async_op"),
    "scatter": ("tensor", "scatter_list", "src", "group", "async_op"),
    "send": ("tensor", "dst", "group", "tag"),
    "recv": ("tensor", "src", "group", "tag"),
    "isend": ("tensor", "dst", "group", "tag"),
    "irecv": ("tensor", "src", "group", "tag"),
    "batch_isend_irecv": ("p2p_op_list",),
}

_on = True
_rate = 1.0
_random = random.random


class _TLS(threading.local):
    busy = False  # inside a wrapped call on this thread (nested calls are not recorded)


_tls = _TLS()
_patched = {}        # op -> original
_modules = []        # modules we patched
_gcache = {}         # id(group) -> [group, group_rank, group_size, ranks_json, seq, p2p seqs]
_c10d = [None]


def set_enabled(value):
    global _on
    _on = str(value).strip().lower() not in ("0", "off", "false", "no")


def _after_fork_in_child():
    global _on
    _on = False  # a forked child is not an active agent (tables are off too)


def set_sample_rate(value):
    global _rate
    try:
        f = float(value)
    except (TypeError, ValueError):
        f = 1.0
    _rate = min(max(f, 0.0), 1.0)


# -- group and tensor facts ------------------------------------------------------
# A group entry is [group, group_rank, group_size, participate_ranks, seq,
# {(direction, peer): seq of the point-to-point calls}].
# The default group's entry is cached in _wentry (with the global rank and
# world size in _wrank); init_process_group / destroy_process_group (both
# wrapped) drop the caches.

_wentry = None
_wrank = [-1, -1]


def _default_pg():
    c = _c10d[0]
    try:
        w = getattr(c, "_world", None)
        if w is not None:
            return w.default_pg
        return c.GroupMember.WORLD
    except Exception:
        return None


def _entry(g):
    d = sys.modules.get("torch.distributed")
    gr, gs, ranks = d.get_rank(g), d.get_world_size(g), ""
    try:
        ranks = str(list(d.get_process_group_ranks(g)))
    except Exception:
        pass
    return [g, gr, gs, ranks, 0, {}]


def _world_entry():
    """The default group's entry, or None before init_process_group."""
    global _wentry
    e = _wentry
    if e is not None:
        return e
    pg = _default_pg()
    if pg is None:
        return None
    try:
        e = _entry(pg)
    except Exception:
        return None
    if not e[3] and e[2] > 0:
        e[3] = str(list(range(e[2])))
    _wrank[0], _wrank[1] = e[1], e[2]
    _gcache[id(pg)] = e
    _wentry = e
    return e


def _nogroup():
    return [None, 0, 0, "", 0, {}]


def _group(g):
    """The entry of group g (None = the default group), cached per group."""
    if g is None:
        e = _wentry if _wentry is not None else _world_entry()
        return e if e is not None else _nogroup()
    e = _gcache.get(id(g))
    if e is not None and e[0] is g:
        return e
    w = _world_entry()
    if w is not None and w[0] is g:
        return w
    try:
        e = _entry(g)
    except Exception:
        return _nogroup()
    _gcache[id(g)] = e
    return e


def _reset_groups():
    global _wentry
    _gcache.clear()
    _wentry = None
    _wrank[0] = _wrank[1] = -1


_dtype_names = {}


def _one(t):
    dt = t.dtype
    s = _dtype_names.get(dt)
    if s is None:
        s = _dtype_names[dt] = str(dt)
    return str(tuple(t.shape)), s, t.numel() * t.element_size()


def _tensor_facts(x):
    """(shape text, (dtype text, bytes)) of a list of tensors (or P2POps)."""
    if isinstance(x, (list, tuple)):
        shapes, dtype, total = [], "", 0
        for t in x:
            t = getattr(t, "tensor", t)  # P2POp
            try:
                s, dt, n = _one(t)
            except Exception:
                continue
            if len(shapes) < 16:
                shapes.append(s)
            dtype = dtype or dt
            total += n
        if len(x) > 16:
            shapes.append("...")
        return "[" + ", ".join(shapes) + "]", (dtype, total)
    try:
        s, dt, n = _one(x)
        return s, (dt, n)
    except Exception:
        return "", ("", 0)


# -- the wrapper --------------------------------------------------------------------

def _params(op, fn):
    try:
        import inspect

        return tuple(inspect.signature(fn).parameters)
    except Exception:
        return _FALLBACK_PARAMS.get(op, ())


_P2P_DIR = {"send": ("s", "dst", "group_dst"), "isend": ("s", "dst", "group_dst"),
            "recv": ("r", "src", "group_src"), "irecv": ("r", "src", "group_src")}


def _global_peer(g, peer, group_peer):
    """The peer's global rank (-1 unknown): torch takes either."""
    try:
        if peer is not None:
            return int(peer)
        if group_peer is not None:
            if g is None:
                return int(group_peer)
            return int(sys.modules["torch.distributed"].get_global_rank(g, group_peer))
    except Exception:
        pass
    return -1


def _p2p_seq(ge, direction, peer):
    """The 1-based count of this process's calls in that direction with
    that peer on group entry ge."""
    d = ge[5]
    k = (direction, peer)
    n = d.get(k, 0) + 1
    d[k] = n
    return n


def _make_wrapper(op, fn):
    params = _params(op, fn)
    tname = OPS.get(op)
    ti = params.index(tname) if tname in params else -1
    gi = params.index("group") if "group" in params else -1
    ai = params.index("async_op") if "async_op" in params else -1
    always_async = op in _ALWAYS_ASYNC
    is_batch = op == "batch_isend_irecv"
    p2p = _P2P_DIR.get(op)
    if p2p is not None:
        direction = p2p[0]
        pi = params.index(p2p[1]) if p2p[1] in params else -1
        gpi = params.index(p2p[2]) if p2p[2] in params else -1
    # batch_isend_irecv calls the isend/irecv of its P2POps, and torch's
    # send/recv may call isend/irecv: a point-to-point call made inside
    # another is part of the outer one's row. Other nested calls inside
    # torch go to module globals that are recorded as what they are.
    nestable = p2p is not None
    holds = nestable or is_batch
    perf = time.perf_counter
    STEP = steptiming.STEP

    tls = _tls
    q = tables._queue
    qmax, kick = tables.QUEUE_MAX, tables.KICK
    write = _write_row

    def queue(e):
        n = len(q)
        if n < qmax:
            q.append((write, e))
            if n == kick:
                tables._flush_ev.set()
            return e
        tables._qdropped[0] += 1
        return None

    def wrapper(*args, **kwargs):
        if not _on or (nestable and tls.busy):
            return fn(*args, **kwargs)
        e = None
        batch = None
        t0 = perf()
        try:
            if is_batch:
                batch = _batch_entries(args[0] if args else kwargs.get("p2p_op_list"), t0, queue)
            else:
                g = args[gi] if 0 <= gi < len(args) else kwargs.get("group")
                x = (args[ti] if 0 <= ti < len(args) else kwargs.get(tname)) if tname else None
                ge = _wentry if g is None and _wentry is not None else _group(g)
                if p2p is None:
                    ge[4] += 1
                    seq, peer = ge[4], -1
                else:
                    peer = _global_peer(g, args[pi] if 0 <= pi < len(args) else kwargs.get(p2p[1]),
                                        args[gpi] if 0 <= gpi < len(args) else kwargs.get(p2p[2]))
                    seq = _p2p_seq(ge, direction, peer)
                if _rate >= 1.0 or _random() < _rate:
                    if always_async:
                        a = 1
                    else:
                        a = 1 if (args[ai] if 0 <= ai < len(args) else kwargs.get("async_op")) else 0
                    if x is None:
                        shape, dtype = "", ""
                    elif isinstance(x, (list, tuple)):
                        shape, dtype = _tensor_facts(x)
                    else:
                        shape, dtype = x.shape, x.dtype
                    e = [t0, STEP[0], STEP[1], STEP[2], STEP[3], _wrank[0], _wrank[1], op, ge,
                         shape, dtype, 0, a, seq, -1.0, None, peer]
                    n = len(q)  # queue(e), inline: this is every collective's path
                    if n < qmax:
                        q.append((write, e))
                        if n == kick:
                            tables._flush_ev.set()
                    else:
                        tables._qdropped[0] += 1
                        e = None
        except Exception as err:
            e = batch = None
            tables.warn_once(("collective", op), "recording %s failed: %s", op, err)
        if holds:
            tls.busy = True
        try:
            return fn(*args, **kwargs)
        finally:
            if holds:
                tls.busy = False
            if e is not None:
                dt = (perf() - t0) * 1000.0
                e[14] = dt
                if e[15] is not None:  # already in the ring (a long call): patch it there
                    _patch(e, dt)
            elif batch:
                dt = (perf() - t0) * 1000.0
                for b in batch:
                    b[14] = dt
                    if b[15] is not None:
                        _patch(b, dt)

    return wrapper


def _batch_entries(ops, t0, queue):
    """One queued entry per P2POp of a batch_isend_irecv call, each counted
    on its own group, direction and peer."""
    out = []
    STEP = steptiming.STEP
    sample = _rate >= 1.0 or _random() < _rate
    for o in ops or ():
        name = getattr(getattr(o, "op", None), "__name__", "")
        if name not in ("isend", "irecv"):
            name = "irecv" if "recv" in name else "isend"
        g = getattr(o, "group", None)
        ge = _wentry if g is None and _wentry is not None else _group(g)
        peer = _global_peer(g, getattr(o, "peer", None), getattr(o, "group_peer", None))
        seq = _p2p_seq(ge, "s" if name == "isend" else "r", peer)
        if not sample:
            continue
        t = getattr(o, "tensor", None)
        shape, dtype = (t.shape, t.dtype) if t is not None else ("", "")
        e = queue([t0, STEP[0], STEP[1], STEP[2], STEP[3], _wrank[0], _wrank[1], name, ge,
                   shape, dtype, 0, 1, seq, -1.0, None, peer])
        if e is not None:
            out.append(e)
    return out


# An entry: [0 perf_counter at entry, 1 micro_step, 2 local_step,
# 3 global_step, 4 micro_batches, 5 rank, 6 world_size, 7 op, 8 group entry,
# 9 shape (torch.Size, or text for a list), 10 dtype (torch.dtype, or
# (text, bytes) for a list), 11 unused,
# 12 async_op, 13 group_seq, 14 duration_ms (-1.0 while in flight),
# 15 where the row went (set by the flusher when it wrote an in-flight row),
# 16 peer (-1 for a collective)].
# Handshake without a lock (each list store/load is atomic under the GIL):
# the caller stores [14] then reads [15]; the flusher stores [15] then
# re-reads [14]. Whichever sees the other's store patches the row (both
# may; the value is the same).

_itemsizes = {}


def _itemsize(dt):
    n = _itemsizes.get(dt)
    if n is None:
        try:
            n = int(dt.itemsize)
        except Exception:
            try:
                import torch

                n = torch.empty((), dtype=dt).element_size()
            except Exception:
                n = 0
        _itemsizes[dt] = n
    return n


def _dtype_str(dt):
    s = _dtype_names.get(dt)
    if s is None:
        s = _dtype_names[dt] = str(dt)
    return s


def _write_row(e):
    """Flusher side: write one queued entry (see _write_rows)."""
    _write_rows([e])


def _write_rows(entries):
    """Flusher side, batched: every queued entry of one flush."""
    r = tables._rings.get("comm_collective") or tables.ring("comm_collective")
    if r is None:
        return
    role = tables.identity_fields()[2]
    off = tables.epoch_offset[0]
    rows = []
    for e in entries:
        ge = e[8]
        shape, dtype = e[9], e[10]
        nbytes = 0
        if dtype.__class__ is tuple:
            dtype, nbytes = dtype
        elif dtype.__class__ is not str:
            n = 1
            for d in shape:
                n *= d
            nbytes = n * _itemsize(dtype)
            shape = str(tuple(shape))
            dtype = _dtype_str(dtype)
        rank, ws = e[5], e[6]
        if rank < 0:
            rank, ws = _wrank if _wentry is not None else tables.identity_fields()[:2]
        rows.append((int((e[0] + off) * 1e6), e[1], e[2], e[3], e[4], rank, ws, role, e[7],
                     ge[1], ge[2], ge[3], shape, dtype, nbytes, e[14], e[12], e[13], e[16]))
    res = r.append_batch(rows)
    w = r.writer
    for e, row, loc in zip(entries, rows, res):
        if loc[0] == 0 and row[15] == -1.0:  # written while in flight
            e[15] = loc
            d2 = e[14]
            if d2 != -1.0:
                w.update_f64(loc[1], loc[2], loc[3] - _DURATION_BACK, d2)


_write_row.batch = _write_rows

# duration_ms is followed by async_op, group_seq and peer (3 x I64): its
# offset back from the end of the row.
_DURATION_BACK = 32


def _patch(e, dt):
    try:
        r = tables._rings.get("comm_collective")
        loc = e[15]
        if r is not None and loc is not None:
            r.writer.update_f64(loc[1], loc[2], loc[3] - _DURATION_BACK, dt)
    except Exception:
        pass


def _wrap_reset(fn):
    """init_process_group / destroy_process_group: drop the group caches."""
    def reset_groups(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            _reset_groups()
            tables.invalidate_identity()
    return reset_groups


def patch(dist):
    """Wrap the collectives of module ``dist`` (torch.distributed)."""
    try:
        if not dist.is_available():
            return 0
    except Exception:
        return 0
    c10d = sys.modules.get("torch.distributed.distributed_c10d") or getattr(dist, "distributed_c10d", None)
    _c10d[0] = c10d if c10d is not None else dist
    import functools

    mods = [m for m in (dist, c10d) if m is not None]

    def install(name, make):
        """Replaces dist.<name> (and the c10d alias) by make(original)."""
        orig = getattr(dist, name, None)
        if orig is None or getattr(orig, "__probing_mcp_wrapped__", None) is not None:
            return False
        w = make(orig)
        try:
            functools.update_wrapper(w, orig)
        except Exception:
            pass
        w.__probing_mcp_wrapped__ = orig
        for m in mods:
            if getattr(m, name, None) is orig:
                setattr(m, name, w)
        _patched[name] = orig
        return True

    n = 0
    for op in OPS:
        if install(op, lambda orig, op=op: _make_wrapper(op, orig)):
            n += 1
    for name in ("init_process_group", "destroy_process_group"):
        install(name, _wrap_reset)
    for m in mods:
        if m not in _modules:
            _modules.append(m)
    return n


def _on_import(dist):
    n = patch(dist)
    if n:
        tables.log.debug("wrapped %d torch.distributed collectives", n)


def install():
    tables.identity_fields()  # prime rank/role cache
    tables.when_imported("torch.distributed", _on_import)


def unpatch():
    """Put the originals back (tests)."""
    for m in _modules:
        for op, orig in _patched.items():
            cur = getattr(m, op, None)
            if getattr(cur, "__probing_mcp_wrapped__", None) is orig:
                setattr(m, op, orig)
    _patched.clear()
    del _modules[:]
    _reset_groups()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# -- collectives that are not torch.distributed's ---------------------------------
# A job that synchronises its ranks by other means (its own sockets, MPI, a
# custom communication library) records each call with record(), and the
# row goes into python.comm_collective exactly as a wrapped torch call's
# would: its group is named by its members, group_seq counts the calls on
# it, and duration_ms is -1 until the call returns. The server's diagnosis
# then sees who waits for whom without torch.

_custom_groups = {}  # tuple(ranks) -> group entry


class _Record(object):
    __slots__ = ("e",)

    def __init__(self, e):
        self.e = e

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        e = self.e
        if e is not None:
            dt = (time.perf_counter() - e[0]) * 1000.0
            e[14] = dt
            if e[15] is not None:
                _patch(e, dt)
        return False


def record(op, ranks, rank=None, nbytes=0):
    """Context manager recording one collective call of this rank on the
    group of global ``ranks`` (a list), e.g.::

        with probing_mcp_agent.record_collective("all_reduce", [0, 1, 2, 3]):
            my_all_reduce(buf)

    ``rank`` is this process's global rank (default: the identity's).
    Recording never raises and costs a list append; when the agent is off
    it does nothing."""
    e = None
    try:
        if _on and tables._enabled:
            key = tuple(sorted(int(r) for r in ranks))
            ge = _custom_groups.get(key)
            if ge is None:
                r0 = tables.identity_fields()[0] if rank is None else int(rank)
                gr = key.index(r0) if r0 in key else 0
                ge = [None, gr, len(key), str(list(key)), 0, {}]
                _custom_groups[key] = ge
            ge[4] += 1
            me, ws = (tables.identity_fields()[:2] if rank is None else (int(rank), -1))
            STEP = steptiming.STEP
            e = [time.perf_counter(), STEP[0], STEP[1], STEP[2], STEP[3], me, ws, str(op), ge,
                 "", ("", int(nbytes)), 0, 0, ge[4], -1.0, None, -1]
            # The shared queue (it starts the flusher if none runs yet); a
            # dropped row leaves e unwritten, so __exit__ patches nothing.
            tables.defer_call(_write_row, e)
    except Exception as err:
        e = None
        tables.warn_once(("collective", "record"), "recording %s failed: %s", op, err)
    return _Record(e)
