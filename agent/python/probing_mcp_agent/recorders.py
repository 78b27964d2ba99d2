"""The recorders' lifecycle: their config keys, start and stop.

``start()`` (called by the core at activation through activation._optional,
after frenv.configure_env()) registers the config keys
(probing.comm.collectives, probing.sample_rate, probing.step_timing,
probing.span.backends, probing.span.location, probing.fr.on_watchdog,
probing.tables.flush_interval), starts the ring flusher thread (tables.py),
then wires the collectors: the torch.distributed wrappers and the optimizer
step hooks are installed as soon as torch is imported (immediately if it
already is; otherwise by a one-shot post-import hook on sys.meta_path that
watches only the ``torch.distributed`` and ``torch.optim.optimizer`` module
names, inert once both fired). ``stop()`` stops recording.

This module knows the recorders (collectives, steptiming, spans, fr) and
the tables they write; the recorders know the tables and not this module,
and the tables know neither. Nothing here may break the training process:
every step catches its exceptions and logs them once per kind.
"""

import os
import sys

from . import tables
from .oncelog import warn_once

def _rate(v):
    f = float(str(v).strip())
    if not (0.0 <= f <= 1.0):
        raise ValueError("accepted values are numbers from 0 to 1")
    return f


def _auto_on_off(v):
    s = str(v).strip().lower()
    if s == "auto":
        return s
    if s in ("1", "true", "on", "yes"):
        return "on"
    if s in ("0", "false", "off", "no"):
        return "off"
    raise ValueError("accepted values are auto, on, off")


def _backends(v):
    out = []
    for b in str(v).replace(";", ",").split(","):
        b = b.strip().lower()
        if not b:
            continue
        if b not in ("memtable", "logger", "none", "otel"):
            warn_once(("span-backend", b), "unknown span backend %r: using memtable", b)
            b = "memtable"
        if b not in out:
            out.append(b)
    return ",".join(out) or "memtable"


def register_config():
    """Declare the keys the recorders honour (agent/PROTOCOL.md)."""
    from . import config

    on_off = getattr(config, "on_off", None)
    from . import collectives, spans, steptiming, fr

    def reg(key, default, doc, validator=None, on_change=None):
        try:
            v = config.register(key, default, doc, validator=validator, on_change=on_change)
        except Exception as e:
            warn_once(("config", key), "config key %s: %s", key, e)
            v = config.get(key, default)
        # Env mirroring turns every "_" into "." (PROBING_FR_ON_WATCHDOG ->
        # probing.fr.on.watchdog), so a key with "_" in a segment is also
        # read from its own variable, unless the key was set explicitly.
        env = "PROBING_" + key[len("probing."):].upper().replace(".", "_")
        ev = os.environ.get(env)
        if ev is not None and ev.strip() and "_" in key and v == default:
            try:
                config.set(key, ev)
                v = config.get(key, default)
                on_change = None  # set() already applied it
            except Exception as e:
                warn_once(("config-env", key), "%s=%r refused: %s", env, ev, e)
        if on_change is not None:
            try:
                on_change(v)
            except Exception as e:
                warn_once(("config-apply", key), "config key %s=%r: %s", key, v, e)

    reg("probing.comm.collectives", "on",
        "Record python.comm_collective by wrapping torch.distributed collectives (on/off)",
        on_off, collectives.set_enabled)
    reg("probing.sample_rate", 1.0,
        "Fraction of collectives recorded in python.comm_collective (0..1); group_seq still counts every call",
        _rate, collectives.set_sample_rate)
    reg("probing.step_timing", "on",
        "Record python.torch_step_timing from optimizer step hooks (on/off)",
        on_off, steptiming.set_enabled)
    reg("probing.span.backends", "memtable",
        "Span backends: memtable (python.trace_event), logger and/or none, comma-separated",
        _backends, spans.set_backends)
    reg("probing.span.location", "off",
        "Record the caller's file:line in python.trace_event.location (on/off)",
        on_off, spans.set_location)
    reg("probing.tables.flush_interval", tables.FLUSH_INTERVAL,
        "Seconds between two writes of the queued rows (collectives, steps, spans) into the rings (0.01..60)",
        tables._interval, tables.set_flush_interval)
    reg("probing.fr.on_watchdog", "auto",
        "A watchdog or collective-timeout exception triggers a persisted Flight Recorder snapshot (auto=on, on, off)",
        _auto_on_off, fr.set_on_watchdog)


def start():
    """Called by the core at activation: config keys, then the collectors."""
    if not tables.begin():
        return
    try:
        register_config()
    except Exception as e:
        warn_once("register-config", "recorder config keys not registered: %s", e)
    try:
        tables._start_flusher()
    except Exception as e:
        warn_once("flusher-start", "ring flusher not started: %s", e)
    for name in ("steptiming", "collectives", "spans"):
        try:
            mod = __import__(__name__.rsplit(".", 1)[0] + "." + name, fromlist=["install"])
            mod.install()
        except Exception as e:
            warn_once(("install", name), "recorder %s not installed: %s", name, e)


def stop():
    """Stop recording (hooks stay installed but do nothing) and close rings."""
    tables.end()
    for name in ("collectives", "steptiming"):
        try:
            mod = sys.modules.get(__name__.rsplit(".", 1)[0] + "." + name)
            if mod is not None:
                mod.set_enabled(False)
        except Exception:
            pass
    tables.close_all()
