"""A small tracing API: spans and point events, written to python.trace_event.

    from probing_mcp_agent import spans
    with spans.span("forward", phase="forward", layer=3):
        ...
    @spans.span("load_batch")
    def load_batch(): ...
    spans.event("checkpoint_saved", path=p)

Rows (contract §3.2): timestamp (µs, write time), record_type
("span_start" / "span_end" / "event"), trace_id (the root span's id),
span_id, name, time (ns since the epoch), thread_id, parent_id (-1 for a
root span), phase (the ``phase`` attribute, inherited from the parent
span), location ("file:line" of the caller when probing.span.location is
on), attributes (JSON: the span's attributes plus rank and global_step;
span_end adds duration_ms and, when the block raised, error), and
event_attributes (JSON, event rows only).

An event row carries the enclosing span's trace_id and span_id (0 when
there is none) and that span's parent_id. The current span follows
contextvars, so it is per thread and per asyncio task.

Backends (probing.span.backends, comma-separated): ``memtable`` (the ring),
``logger`` (one log line per record on the "probing_mcp_agent.span" logger,
at PROBING_SPAN_LOG_LEVEL, default INFO), ``none``. ``otel`` and unknown
names fall back to memtable, as Probing does.
"""

import contextvars
import functools
import json
import logging
import os
import random
import sys
import threading
import time

from . import steptiming, tables

_mem = True
_log = False
_location = False
_cur = contextvars.ContextVar("probing_mcp_agent_span", default=None)
_getrandbits = random.getrandbits
_span_log = logging.getLogger("probing_mcp_agent.span")


def _log_level():
    v = (os.environ.get("PROBING_SPAN_LOG_LEVEL") or "INFO").strip().upper()
    lv = logging.getLevelName(v)
    return lv if isinstance(lv, int) else logging.INFO


_level = _log_level()


def set_backends(value):
    global _mem, _log
    names = [b.strip().lower() for b in str(value or "").replace(";", ",").split(",") if b.strip()]
    if not names:
        names = ["memtable"]
    mem = log = False
    for b in names:
        if b == "none":
            continue
        if b == "logger":
            log = True
        else:  # memtable, otel, unknown -> memtable
            mem = True
    _mem, _log = mem, log


def set_location(value):
    global _location
    _location = str(value).strip().lower() in ("1", "true", "on", "yes")


def install():
    pass  # nothing to hook: the API writes when it is used


def _dumps(d):
    try:
        return json.dumps(d, separators=(",", ":"), default=str)
    except Exception:
        return "{}"


def _caller(depth):
    try:
        f = sys._getframe(depth)
        return "%s:%d" % (f.f_code.co_filename, f.f_lineno)
    except Exception:
        return ""


def _emit(record_type, trace_id, span_id, name, t_ns, parent_id, phase, location, attrs, event_attrs):
    if _mem and tables._enabled:
        tables.defer("trace_event", (t_ns // 1000, record_type, trace_id, span_id, name, t_ns,
                                     threading.get_ident(), parent_id, phase, location, attrs, event_attrs))
    if _log:
        _span_log.log(_level, "%s %s trace=%d span=%d parent=%d phase=%s %s%s", record_type, name,
                      trace_id, span_id, parent_id, phase, attrs, (" " + event_attrs) if event_attrs else "")


class Span(object):
    """A span; use it as a context manager (or, through span(), as a
    decorator). ``set(**attrs)`` adds attributes written with span_end;
    ``event(name, **attrs)`` writes an event inside it."""

    __slots__ = ("name", "attrs", "phase", "span_id", "trace_id", "parent_id", "start_ns",
                 "location", "_token", "_t0")

    def __init__(self, name, attrs, location=""):
        self.name = str(name)
        self.attrs = attrs
        self.phase = str(attrs.pop("phase", "") or "")
        self.span_id = 0
        self.trace_id = 0
        self.parent_id = -1
        self.start_ns = 0
        self.location = location
        self._token = None
        self._t0 = 0.0

    def _attrs_json(self, extra=None):
        d = dict(self.attrs)
        try:
            d.setdefault("rank", tables.identity_fields()[0])
            d.setdefault("global_step", steptiming.STEP[2])
        except Exception:
            pass
        if extra:
            d.update(extra)
        return _dumps(d)

    def __enter__(self):
        try:
            if not (_mem or _log):
                return self
            parent = _cur.get()
            self.span_id = _getrandbits(62) + 1
            if parent is not None:
                self.parent_id, self.trace_id = parent.span_id, parent.trace_id
                if not self.phase:
                    self.phase = parent.phase
            else:
                self.trace_id = self.span_id
            if _location and not self.location:
                self.location = _caller(2)
            self._token = _cur.set(self)
            self.start_ns = time.time_ns()
            self._t0 = time.perf_counter()
            _emit("span_start", self.trace_id, self.span_id, self.name, self.start_ns, self.parent_id,
                  self.phase, self.location, self._attrs_json(), "")
        except Exception as e:
            tables.warn_once("span", "span %r not recorded: %s", self.name, e)
        return self

    def __exit__(self, etype, evalue, tb):
        try:
            if self._token is not None:
                try:
                    _cur.reset(self._token)
                except ValueError:  # exited in another context
                    _cur.set(None)
                self._token = None
                extra = {"duration_ms": round((time.perf_counter() - self._t0) * 1000.0, 6)}
                if etype is not None:
                    extra["error"] = "%s: %s" % (etype.__name__, evalue)
                _emit("span_end", self.trace_id, self.span_id, self.name, time.time_ns(), self.parent_id,
                      self.phase, self.location, self._attrs_json(extra), "")
        except Exception as e:
            tables.warn_once("span", "span %r not recorded: %s", self.name, e)
        return False

    def set(self, **attrs):
        self.attrs.update(attrs)
        return self

    def event(self, name, **attrs):
        try:
            if _mem or _log:
                _emit("event", self.trace_id, self.span_id, str(name), time.time_ns(), self.parent_id,
                      self.phase, _caller(2) if _location else "", "{}", _dumps(attrs))
        except Exception as e:
            tables.warn_once("event", "event %r not recorded: %s", name, e)

    def __call__(self, fn):
        """Decorator: a fresh span around every call of fn."""
        name, attrs = self.name, dict(self.attrs)
        if self.phase:
            attrs["phase"] = self.phase

        @functools.wraps(fn)
        def traced(*args, **kwargs):
            with Span(name, dict(attrs), _caller(2) if _location else ""):
                return fn(*args, **kwargs)
        return traced


def span(name, **attrs):
    """A span context manager / decorator. ``span(fn)`` (no name) decorates
    fn with a span named after its qualified name."""
    if callable(name) and not attrs:
        fn = name
        return Span(getattr(fn, "__qualname__", getattr(fn, "__name__", "span")), {})(fn)
    return Span(name, attrs)


def event(name, **attrs):
    """A point event, attached to the current span if there is one."""
    try:
        if not (_mem or _log):
            return
        cur = _cur.get()
        if cur is not None:
            tid, sid, pid, phase = cur.trace_id, cur.span_id, cur.parent_id, cur.phase
        else:
            tid, sid, pid, phase = 0, 0, -1, ""
        phase = str(attrs.pop("phase", phase) or "")
        _emit("event", tid, sid, str(name), time.time_ns(), pid, phase,
              _caller(2) if _location else "", "{}", _dumps(attrs))
    except Exception as e:
        tables.warn_once("event", "event %r not recorded: %s", name, e)


def current_span():
    return _cur.get()
