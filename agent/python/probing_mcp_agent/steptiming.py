"""python.torch_step_timing, and the step counter every recorder shares.

Steps are counted by torch's global optimizer hooks
(torch.optim.optimizer.register_optimizer_step_pre_hook / _post_hook),
installed once torch.optim.optimizer is imported. Nothing else in the
training loop is touched.

Step coordinates (``STEP``, read by collectives.py and spans.py):

* ``global_step`` = optimizer steps completed so far by this rank: rows
  written *during* step k (collectives, spans) carry k, and the step-timing
  row written when step k ends carries k too, so the tables join on it.
  0-based.
* ``micro_batches`` = PROBING_MICRO_BATCHES (default 1).
* ``micro_step`` = global_step * micro_batches at the start of a step (the
  hooks cannot see micro-batch boundaries; ``next_micro_step()`` lets a
  training loop advance it), ``local_step`` = micro_step // micro_batches.
* ``set_step(global_step=...)`` lets a framework impose its own step.

With several optimizers (GANs, per-module optimizers) only the first
optimizer that steps is counted; if it is garbage-collected the next one to
step takes over. Other optimizers' steps write no rows.

Row (contract §3.2): timestamp, micro_step, local_step, global_step,
micro_batches, rank, world_size, role, step_duration_sec (wall time between
the end of the previous step and the end of this one; -1 for the first
step), is_shadow 0, sampled 1, shadow_normal 0, shadow_baseline 0,
sample_rate 1.0, sample_mode "optimizer_hook" (Probing's module-hook
profiler fills the shadow/sampling columns; we have no shadow steps).
"""

import os
import time
import weakref

from . import tables

# micro_step, local_step, global_step, micro_batches
STEP = [0, 0, 0, 1]

_enabled = True   # write rows (the counter always runs)
_installed = False
_handles = []
_owner = None     # weakref to the counted optimizer
_last_end = [None]


def _micro_batches():
    v = (os.environ.get("PROBING_MICRO_BATCHES") or "").strip()
    try:
        n = int(v)
        return n if n > 0 else 1
    except ValueError:
        return 1


def set_enabled(value):
    global _enabled
    _enabled = str(value).strip().lower() not in ("0", "off", "false", "no")


def set_step(global_step=None, micro_step=None):
    """Impose the step (e.g. a framework's iteration number)."""
    mb = STEP[3]
    if global_step is not None:
        STEP[2] = int(global_step)
        if micro_step is None:
            STEP[0] = STEP[2] * mb
    if micro_step is not None:
        STEP[0] = int(micro_step)
    STEP[1] = STEP[0] // mb


def next_micro_step():
    """Advance the micro-batch counter (for loops with gradient accumulation)."""
    STEP[0] += 1
    STEP[1] = STEP[0] // STEP[3]


def current():
    """(micro_step, local_step, global_step, micro_batches)."""
    return STEP[0], STEP[1], STEP[2], STEP[3]


def _counted(optimizer):
    global _owner
    o = _owner() if _owner is not None else None
    if o is optimizer:
        return True
    if o is None:
        try:
            _owner = weakref.ref(optimizer)
        except TypeError:
            return False
        return True
    return False


def _post_hook(optimizer, args, kwargs):
    try:
        if not _counted(optimizer):
            return
        now = time.perf_counter()
        prev = _last_end[0]
        _last_end[0] = now
        mb = STEP[3]
        k = STEP[2]
        if _enabled:
            tables.defer_call(_write_row, (now, STEP[0], STEP[1], k, mb,
                                           (now - prev) if prev is not None else -1.0))
        # the next step starts
        STEP[2] = k + 1
        if STEP[0] < STEP[2] * mb:
            STEP[0] = STEP[2] * mb
        STEP[1] = STEP[0] // mb
    except Exception as e:
        tables.warn_once("steptiming", "step timing hook failed: %s", e)


def _write_row(a):
    """Flusher side: complete and write one step row."""
    r = tables._rings.get("torch_step_timing") or tables.ring("torch_step_timing")
    if r is None:
        return
    rank, ws, role = tables.identity_fields()
    r.append_values((int((a[0] + tables.epoch_offset[0]) * 1e6), a[1], a[2], a[3], a[4], rank, ws, role,
                     a[5], 0, 1, 0, 0, 1.0, "optimizer_hook"))


def _write_rows(args):
    r = tables._rings.get("torch_step_timing") or tables.ring("torch_step_timing")
    if r is None:
        return
    rank, ws, role = tables.identity_fields()
    off = tables.epoch_offset[0]
    r.append_batch([(int((a[0] + off) * 1e6), a[1], a[2], a[3], a[4], rank, ws, role,
                     a[5], 0, 1, 0, 0, 1.0, "optimizer_hook") for a in args])


_write_row.batch = _write_rows


def _install_hooks(mod):
    global _installed
    if _installed:
        return
    post = getattr(mod, "register_optimizer_step_post_hook", None)
    if post is None:
        tables.warn_once("steptiming-api", "torch.optim has no global step hooks: no step timing")
        return
    _handles.append(post(_post_hook))
    _installed = True


def install():
    STEP[3] = _micro_batches()
    STEP[1] = STEP[0] // STEP[3]
    tables.when_imported("torch.optim.optimizer", _install_hooks)


def uninstall():
    global _installed
    while _handles:
        try:
            _handles.pop().remove()
        except Exception:
            pass
    _installed = False
