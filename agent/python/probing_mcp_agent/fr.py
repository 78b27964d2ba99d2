"""PyTorch Flight Recorder (FR): environment, snapshots, watchdog hook.

configure_env() — called by the core at activation, before torch creates a
process group. It sets, only where the variable is unset:

  TORCH_FR_BUFFER_SIZE=2000 and/or TORCH_NCCL_TRACE_BUFFER_SIZE=2000
      when neither is set: FR recording on (ring of 2000 entries). A value
      of 0 set by the user is respected (FR stays off).
  TORCH_FR_DUMP_TEMP_FILE and/or TORCH_NCCL_DEBUG_INFO_TEMP_FILE
      =<data dir>/<pid>/fr_dump_rank_ when neither is set: torch's own
      dumps (on watchdog timeout with TORCH_NCCL_DUMP_ON_TIMEOUT, or through
      the pipe below) land in the process's data dir as
      fr_dump_rank_<global rank>, where the Go side can pick them up.
  Which of each pair: torch >= 2.8 (its version read from torch/version.py
  without importing torch) gets the TORCH_FR_* name only, since it warns
  that the TORCH_NCCL_* aliases are deprecated; older torch gets the
  TORCH_NCCL_* name only; an unknown version gets both.
  TORCH_NCCL_DEBUG_INFO_PIPE_FILE=<data dir>/<pid>/fr_pipe_
      ProcessGroupNCCL then creates the FIFO fr_pipe_<rank>.pipe; writing a
      byte to it makes torch dump the NCCL recorder to the file above from
      its own thread, without the GIL (a rank wedged holding the GIL can
      still be dumped). NCCL only; gloo ignores it.

The variables are inherited by child processes. So that each rank gets its
own prefixes, configure_env() also exports PROBING_MCP_FR_DEFAULTS=
"<pid>:<names of the path variables it set>"; an agent in a child (PROBING=2)
that finds another pid there unsets those of the named variables that
still hold that agent's default and sets its own (a value the user set is
kept). torch reads the variables when the first process group is
created, so configure_env() after init_process_group has no effect (a
warning says so).

snapshot() — dumps the recorder through torch._C._distributed_c10d:
  NCCL recorder: _dump_nccl_trace (pickle) / _dump_nccl_trace_json;
  generic recorder (torch >= 2.8; gloo/CPU and hooked backends):
  _dump_fr_trace / _dump_fr_trace_json (with backend=<the PG's backend>).
The NCCL recorder is preferred; it is skipped when the default group has
no NCCL backend, or when its dump is empty and the generic one is not
(CUDA wheels carry the NCCL functions even in a gloo-only job).

install_watchdog_hook() — chains sys.excepthook and threading.excepthook.
An uncaught exception triggers a persisted snapshot (only_active=True, as
Probing does) when probing.fr.on_watchdog is auto/on and
  * its lower-cased "<Type> <message>" contains "watchdog" and one of
    "nccl", "worknccl", "collective" (Probing's rule), or
  * it is a torch.distributed.DistBackendError (or DistError subclass with
    "timeout" in the text), or
  * its text says it timed out ("timed out"/"timeout") and names a
    communication layer ("gloo", "nccl", "collective", "c10d",
    "process group", "processgroup") — gloo's collective timeout is a
    plain RuntimeError "[.../gloo/...] Timed out waiting 3000ms for recv
    operation to complete".
The chain (__cause__/__context__) is checked too. The previous hooks always
run afterwards.
"""

import base64
import json
import logging
import os
import pickle
import sys
import threading
import time

from . import tables

log = logging.getLogger("probing_mcp_agent")

_on_watchdog = "auto"
# One snapshot at a time. It is held across torch's dump function (a call
# into torch), so it is never waited on without a bound: a client waits up
# to SNAPSHOT_WAIT_S, and the exception hook, on the program's thread, not
# at all (the snapshot in flight records the same state).
_lock = threading.Lock()
SNAPSHOT_WAIT_S = 30.0
last = {}             # the last snapshot's reply (without data_b64) or error


class SnapshotError(Exception):
    """A snapshot that could not be taken; the message says why."""


def set_on_watchdog(value):
    global _on_watchdog
    v = str(value).strip().lower()
    _on_watchdog = v if v in ("auto", "on", "off") else ("off" if v in ("0", "false", "no") else "on")


# -- environment: frenv.py (the core calls it at activation, where fr's own
# imports would cost every interpreter start); re-exported here.

from .frenv import (DEFAULTS_VAR, ENV_SET, FR_BUFFER_DEFAULT, _PATH_VARS, _dist_initialized,  # noqa: E402,F401
                    _drop_inherited, _names, configure_env, torch_version_on_disk)


# -- dump ---------------------------------------------------------------------------

def _c10d_module():
    torch = sys.modules.get("torch")
    if torch is None:
        raise SnapshotError("torch is not imported in this process")
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available():
            raise SnapshotError("torch.distributed is not available in this torch build")
    except SnapshotError:
        raise
    except Exception as e:
        raise SnapshotError("torch.distributed is not usable: %s" % e)
    try:
        return dist, torch._C._distributed_c10d
    except Exception as e:
        raise SnapshotError("torch._C._distributed_c10d is missing: %s" % e)


def _backends(dist):
    """Backend names of the default group, e.g. ['gloo'] or ['gloo', 'nccl']."""
    try:
        if not dist.is_initialized():
            return []
        b = str(dist.get_backend())
    except Exception:
        return []
    out = []
    for part in b.lower().split(","):
        name = part.split(":")[-1].strip()
        if name and name not in out:
            out.append(name)
    return out


def _call(fn, kwargs, backend=None):
    if backend is not None:
        try:
            return fn(backend=backend, **kwargs)
        except TypeError:
            pass
    try:
        return fn(**kwargs)
    except TypeError:
        # older signatures are positional
        return fn(*kwargs.values())


def _parse(data, fmt):
    if isinstance(data, str):
        data = data.encode("utf-8")
    if fmt == "json":
        return data, json.loads(data.decode("utf-8"))
    # pickle.loads of torch's own dump, produced by this very process's
    # torch a moment ago (never of bytes from outside): it only counts
    # records and PGs and fills the tables.
    return data, pickle.loads(data)


def _empty(d):
    return not (d.get("entries") or d.get("pg_status"))


def dump(fmt="pickle", include_stack_traces=True, only_active=False):
    """(function name, raw bytes, parsed dict) of the best recorder."""
    if fmt not in ("pickle", "json"):
        raise SnapshotError("format must be pickle or json, not %r" % (fmt,))
    dist, c = _c10d_module()
    backends = _backends(dist)
    nccl_name = "_dump_nccl_trace" if fmt == "pickle" else "_dump_nccl_trace_json"
    fr_name = "_dump_fr_trace" if fmt == "pickle" else "_dump_fr_trace_json"
    kw = {"includeCollectives": True}
    if fmt == "pickle":
        kw["includeStackTraces"] = bool(include_stack_traces)
    kw["onlyActive"] = bool(only_active)
    candidates = []
    if hasattr(c, nccl_name) and (not backends or "nccl" in backends):
        candidates.append((nccl_name, None))
    if hasattr(c, fr_name):
        fr_backend = next((b for b in backends if b != "nccl"), "gloo")
        candidates.append((fr_name, fr_backend))
    if hasattr(c, nccl_name) and backends and "nccl" not in backends:
        candidates.append((nccl_name, None))  # last resort
    if not candidates:
        raise SnapshotError("this torch has no Flight Recorder dump function "
                            "(_dump_nccl_trace or _dump_fr_trace, torch >= 2.8 for gloo/CPU)")
    first, errors = None, []
    for name, backend in candidates:
        try:
            data = _call(getattr(c, name), dict(kw), backend)
            raw, d = _parse(data, fmt)
        except Exception as e:
            errors.append("%s: %s" % (name, e))
            continue
        if not isinstance(d, dict):
            errors.append("%s: not a dict" % name)
            continue
        if not _empty(d):
            return name, raw, d
        if first is None:
            first = (name, raw, d)
    if first is None:
        raise SnapshotError("Flight Recorder dump failed: " + "; ".join(errors))
    if not _dist_initialized():
        raise SnapshotError("no process group: torch.distributed is not initialized and the "
                            "Flight Recorder buffer is empty")
    name, raw, d = first
    if not d.get("pg_config"):
        raise SnapshotError("the Flight Recorder buffer is empty: set TORCH_FR_BUFFER_SIZE (or "
                            "TORCH_NCCL_TRACE_BUFFER_SIZE) > 0 before init_process_group (now %s)"
                            % (os.environ.get("TORCH_FR_BUFFER_SIZE") or
                               os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE") or "unset"))
    return first


# -- rows ----------------------------------------------------------------------------

def _int(v, missing=-1):
    if v is None or v == "":
        return missing
    if isinstance(v, bool):
        return int(v)
    try:
        return int(v)
    except (TypeError, ValueError):
        try:
            return int(float(v))
        except (TypeError, ValueError):
            return missing


def _ts(v):
    """A discovered/created timestamp: None, 0 (JSON's "none") -> -1."""
    i = _int(v)
    return -1 if i == 0 else i


def _js(v):
    if v is None:
        return ""
    try:
        return json.dumps(v, default=str)
    except Exception:
        return ""


MAX_FRAMES_JSON = 16 << 10


def _frames(frames):
    if not frames:
        return "", ""
    out = []
    try:
        for f in frames:
            if isinstance(f, dict):
                out.append({"name": str(f.get("name", "")), "filename": str(f.get("filename", "")),
                            "line": _int(f.get("line"), 0)})
    except Exception:
        pass
    if not out:
        return "", ""
    top = "%s (%s:%d)" % (out[0]["name"], out[0]["filename"], out[0]["line"])
    s = json.dumps(out)
    while len(s) > MAX_FRAMES_JSON and len(out) > 1:
        out = out[:max(1, len(out) // 2)]
        s = json.dumps(out)
    return s, top


def _live_groups():
    """{pg name: (desc, "[r0, r1, ...]")} from the live torch.distributed state."""
    out = {}
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    dist = sys.modules.get("torch.distributed")
    if c10d is None or dist is None:
        return out
    try:
        names = dict(c10d._world.pg_names)
    except Exception:
        return out
    for pg, name in names.items():
        try:
            ranks = str(sorted(dist.get_process_group_ranks(pg)))
        except Exception:
            ranks = ""
        desc = ""
        try:
            desc = str(getattr(pg, "group_desc", "") or "")
        except Exception:
            pass
        out[str(name)] = (desc, ranks)
    return out


def rows(d, snapshot_id, rank, world_size, ts_us=None):
    """(flight_record rows, pg_status rows) of a parsed dump, as dicts."""
    ts_us = ts_us if ts_us is not None else tables.now_us()
    entries = d.get("entries") or []
    pg_config = d.get("pg_config") or {}
    pg_status = d.get("pg_status") or {}
    fr_rows = []
    by_id = {}   # pg_id -> (name, desc) from the entries
    for e in entries:
        if not isinstance(e, dict):
            continue
        pg = e.get("process_group") or ("", "")
        try:
            pg_name, pg_desc = str(pg[0]), str(pg[1])
        except Exception:
            pg_name, pg_desc = "", ""
        pid = e.get("pg_id")
        pg_id = str(pid) if pid is not None and pid != "" else pg_name
        by_id.setdefault(pg_id, (pg_name, pg_desc))
        dur = e.get("duration_ns")
        if dur is None and e.get("duration_ms") is not None:
            try:
                dur = int(float(e["duration_ms"]) * 1e6)
            except (TypeError, ValueError):
                dur = None
        frames, top = _frames(e.get("frames"))
        fr_rows.append({
            "timestamp": ts_us, "snapshot_id": snapshot_id, "rank": rank, "world_size": world_size,
            "record_id": _int(e.get("record_id")), "pg_id": pg_id, "pg_name": pg_name, "pg_desc": pg_desc,
            "collective_seq_id": _int(e.get("collective_seq_id")), "p2p_seq_id": _int(e.get("p2p_seq_id")),
            "op_id": _int(e.get("op_id")), "profiling_name": str(e.get("profiling_name") or ""),
            "state": str(e.get("state") or ""),
            "input_sizes": _js(e.get("input_sizes")), "input_dtypes": _js(e.get("input_dtypes")),
            "output_sizes": _js(e.get("output_sizes")), "output_dtypes": _js(e.get("output_dtypes")),
            "time_created_ns": _ts(e.get("time_created_ns")),
            "time_discovered_started_ns": _ts(e.get("time_discovered_started_ns")),
            "time_discovered_completed_ns": _ts(e.get("time_discovered_completed_ns")),
            "duration_ns": _int(dur), "timeout_ms": _int(e.get("timeout_ms")),
            "retired": 1 if e.get("retired") else 0, "is_p2p": 1 if e.get("is_p2p") else 0,
            "frames": frames, "top_frame": top,
        })
    live = None
    pg_rows = []
    for key in sorted(pg_status, key=lambda k: (_int(k, 1 << 62), str(k))):
        v = pg_status.get(key) or {}
        pg_id = str(key)
        name, desc = by_id.get(pg_id, (None, None))
        cfg = None
        if name is not None and isinstance(pg_config.get(name), dict):
            cfg = pg_config[name]
        elif name is None and isinstance(pg_config.get(pg_id), dict) and pg_config[pg_id].get("name"):
            # Probing's lookup: pg_config is keyed by name, pg_status by id
            cfg = pg_config[pg_id]
            name = str(cfg.get("name") or pg_id)
        ranks = str(cfg.get("ranks") or "") if cfg else ""
        if cfg and not desc:
            desc = str(cfg.get("desc") or "")
        if name is None:
            name = pg_id
        if not ranks or not desc:
            if live is None:
                live = _live_groups()
            ldesc, lranks = live.get(name, ("", ""))
            ranks = ranks or lranks
            desc = desc or ldesc
        pg_rows.append({
            "timestamp": ts_us, "snapshot_id": snapshot_id, "rank": rank, "world_size": world_size,
            "pg_id": pg_id, "pg_name": name, "pg_desc": desc or "", "ranks": ranks,
            "last_enqueued_collective": _int(v.get("last_enqueued_collective")),
            "last_started_collective": _int(v.get("last_started_collective")),
            "last_completed_collective": _int(v.get("last_completed_collective")),
        })
    return fr_rows, pg_rows


def _rank_ws():
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:
        pass
    r, ws, _ = tables.identity_fields()
    if r < 0:
        try:
            r = int(os.environ.get("RANK", "-1"))
        except ValueError:
            pass
    if ws < 0:
        try:
            ws = int(os.environ.get("WORLD_SIZE", "-1"))
        except ValueError:
            pass
    return r, ws


def snapshot(fmt="pickle", include_stack_traces=True, only_active=False, persist=True, raw=False,
             wait=SNAPSHOT_WAIT_S):
    """Dump this rank's Flight Recorder. Returns PROTOCOL.md's reply:
    {comm_lib_version, ok, process_groups, rank, records, snapshot_id,
    version, world_size} + format, dump_function, bytes (+ data_b64 when
    raw). persist=True writes the rows to python.torch_nccl_flight_record
    and python.torch_nccl_pg_status (reply key ``persisted``: rows
    written). wait: how long to wait for a snapshot in flight (0: not at
    all). Raises SnapshotError."""
    fmt = str(fmt or "pickle").lower()
    try:
        tables.flush(timeout=1.0)  # queued collective rows first, so the rings line up
    except Exception:
        pass
    got = _lock.acquire(timeout=wait) if wait and wait > 0 else _lock.acquire(False)
    if not got:
        raise SnapshotError("another Flight Recorder snapshot of this process is still running (waited %.0f s); "
                            "ask again once it ends" % max(wait or 0, 0))
    try:
        return _snapshot_locked(fmt, include_stack_traces, only_active, persist, raw)
    finally:
        _lock.release()


def _snapshot_locked(fmt, include_stack_traces, only_active, persist, raw):
    snapshot_id = time.time_ns()
    try:
        name, data, d = dump(fmt, include_stack_traces, only_active)
    except SnapshotError as e:
        last.clear()
        last.update({"ok": False, "error": str(e), "snapshot_id": snapshot_id})
        raise
    except Exception as e:
        last.clear()
        last.update({"ok": False, "error": str(e), "snapshot_id": snapshot_id})
        raise SnapshotError("Flight Recorder dump failed: %s" % e)
    rank, ws = _rank_ws()
    entries = d.get("entries") or []
    pgs = d.get("pg_status") or d.get("pg_config") or {}
    reply = {
        "bytes": len(data),
        "comm_lib_version": str(d.get("comm_lib_version") or d.get("nccl_version") or ""),
        "dump_function": name,
        "format": fmt,
        "ok": True,
        "process_groups": len(pgs),
        "rank": rank,
        "records": len(entries),
        "snapshot_id": snapshot_id,
        "version": str(d.get("version") or ""),
        "world_size": ws,
    }
    if persist:
        try:
            fr_rows, pg_rows = rows(d, snapshot_id, rank, ws)
            n = tables.append_many("torch_nccl_flight_record", fr_rows)
            n += tables.append_many("torch_nccl_pg_status", pg_rows)
            reply["persisted"] = n
        except Exception as e:
            log.warning("fr: snapshot %d not persisted: %s", snapshot_id, e)
            reply["persisted"] = 0
    last.clear()
    last.update(reply)
    if raw:
        reply = dict(reply)
        reply["data_b64"] = base64.b64encode(data).decode("ascii")
    return dict(sorted(reply.items()))


# -- watchdog hook ---------------------------------------------------------------------

_COMM_WORDS = ("gloo", "nccl", "collective", "c10d", "process group", "processgroup")


def is_watchdog_error(exc):
    """Does this exception look like a collective watchdog / timeout?"""
    seen = 0
    while exc is not None and seen < 4:
        seen += 1
        try:
            text = ("%s %s" % (type(exc).__name__, exc)).lower()
        except Exception:
            text = type(exc).__name__.lower()
        if "watchdog" in text and ("nccl" in text or "worknccl" in text or "collective" in text):
            return True
        dist = sys.modules.get("torch.distributed")
        if dist is not None:
            be = getattr(dist, "DistBackendError", None)
            if be is not None and isinstance(exc, be):
                return True
            de = getattr(dist, "DistError", None)
            if de is not None and isinstance(exc, de) and "timeout" in text:
                return True
        if ("timed out" in text or "timeout" in text) and any(w in text for w in _COMM_WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


_in_hook = threading.local()


def on_exception(exc):
    """Snapshot (persisted, only_active) if exc is a watchdog error and the
    key allows it. Returns the reply, or None."""
    if _on_watchdog == "off" or getattr(_in_hook, "busy", False):
        return None
    try:
        if not is_watchdog_error(exc):
            return None
    except Exception:
        return None
    _in_hook.busy = True
    try:
        r = snapshot("pickle", include_stack_traces=True, only_active=True, persist=True, wait=0)
        log.warning("Flight Recorder snapshot %d persisted after %s: %d records, %d process groups",
                    r.get("snapshot_id", 0), type(exc).__name__, r.get("records", 0), r.get("process_groups", 0))
        return r
    except SnapshotError as e:
        log.warning("watchdog-triggered Flight Recorder snapshot failed: %s", e)
    except Exception as e:
        log.warning("watchdog-triggered Flight Recorder snapshot failed: %s", e)
    finally:
        _in_hook.busy = False
    return None


_prev_sys = [None]
_prev_thread = [None]


def _sys_hook(etype, value, tb):
    try:
        on_exception(value)
    except BaseException:
        pass
    prev = _prev_sys[0] or sys.__excepthook__
    prev(etype, value, tb)


def _thread_hook(args):
    try:
        on_exception(args.exc_value)
    except BaseException:
        pass
    prev = _prev_thread[0] or getattr(threading, "__excepthook__", None)
    if prev is not None:
        prev(args)


_sys_hook.__probing_mcp_fr__ = True
_thread_hook.__probing_mcp_fr__ = True


def install_watchdog_hook():
    """Chain sys.excepthook and threading.excepthook (idempotent)."""
    try:
        if not getattr(sys.excepthook, "__probing_mcp_fr__", False):
            _prev_sys[0] = sys.excepthook
            sys.excepthook = _sys_hook
        if hasattr(threading, "excepthook") and not getattr(threading.excepthook, "__probing_mcp_fr__", False):
            _prev_thread[0] = threading.excepthook
            threading.excepthook = _thread_hook
    except Exception as e:
        log.warning("fr: watchdog hook not installed: %s", e)


def uninstall_watchdog_hook():
    if sys.excepthook is _sys_hook:
        sys.excepthook = _prev_sys[0] or sys.__excepthook__
    if getattr(threading, "excepthook", None) is _thread_hook:
        threading.excepthook = _prev_thread[0] or threading.__excepthook__
