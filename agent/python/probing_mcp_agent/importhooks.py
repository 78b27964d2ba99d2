"""Post-import hooks: run a callback when a module is imported (now, if it
already is, or at its first import), without importing it. The recorders
use it to hook torch.distributed and torch.optim only once the program
imports them. A finder on sys.meta_path from the first watch on; it finds
nothing itself, costs one dict lookup per import, and is never removed
(Python iterates sys.meta_path while it calls us: a removal would make it
skip the next finder).

Python calls find_spec holding its global import lock: nothing here
imports or takes a lock there. A callback runs in the importing thread once
the module executed, with no lock of ours held.

Nothing here may break the training process: a failing callback is logged
once (through oncelog.warn_once) and the import goes on.
"""

import sys
import threading
import time


def _warn_once(key, msg, *args):
    from .oncelog import warn_once  # here, not at import: logging comes with it

    warn_once(key, msg, *args)


_watch = {}          # module name -> [callbacks]
_watch_lock = threading.RLock()
_busy = set()


class _Loader(object):
    """Wraps a module's loader to run callbacks once the module executed.
    The module's __loader__ and __spec__.loader are put back to the real
    loader before its code runs, so nothing downstream sees the wrapper."""

    def __init__(self, loader, name):
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        f = getattr(self._loader, "create_module", None)
        return f(spec) if f is not None else None

    def exec_module(self, module):
        try:
            spec = getattr(module, "__spec__", None)
            if spec is not None and spec.loader is self:
                spec.loader = self._loader
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self._loader
        except Exception:
            pass
        self._loader.exec_module(module)
        _fire(self._name, module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _Finder(object):
    """A sys.meta_path entry that only looks at the watched names; for any
    other import it returns None at the cost of one dict lookup."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _watch or fullname in _busy:
            return None
        _busy.add(fullname)
        try:
            spec = None
            for f in list(sys.meta_path):
                if f is self or isinstance(f, _Finder):
                    continue
                fs = getattr(f, "find_spec", None)
                if fs is None:
                    continue
                try:
                    spec = fs(fullname, path, target)
                except TypeError:
                    spec = fs(fullname, path)
                if spec is not None:
                    break
        except Exception:
            return None
        finally:
            _busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _Loader(spec.loader, fullname)
        return spec

    def invalidate_caches(self):
        pass


_finder = _Finder()


def _fire(name, module):
    with _watch_lock:
        cbs = _watch.pop(name, [])
    for cb in cbs:
        try:
            cb(module)
        except Exception as e:
            _warn_once(("import-hook", name, getattr(cb, "__name__", "")),
                      "post-import hook for %s failed: %s", name, e)


def _loaded(name):
    m = sys.modules.get(name)
    if m is None:
        return None
    spec = getattr(m, "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        return None
    return m


def when_imported(name, callback):
    """Call ``callback(module)`` once module ``name`` has been imported:
    now if it already is, else right after its code ran."""
    m = _loaded(name)
    if m is not None:
        callback(m)
        return
    with _watch_lock:
        _watch.setdefault(name, []).append(callback)
        if not any(f is _finder for f in sys.meta_path):
            sys.meta_path.insert(0, _finder)
    # Its import may have got past find_spec before our finder was there
    # (we are called from a background thread while the program imports
    # the package): then nothing would fire. While the top-level package is
    # in sys.modules and the name not loaded, a poller looks, backing off,
    # until the callback ran, the name loaded, or a minute passed.
    if name.partition(".")[0] in sys.modules:
        threading.Thread(target=_poll, args=(name,), name="probing-mcp-import-watch", daemon=True).start()


def _poll(name):
    delay, waited = 0.02, 0.0
    while waited < 60.0:
        if name not in _watch:
            return
        mod = _loaded(name)
        if mod is not None:
            _fire(name, mod)
            return
        time.sleep(delay)
        waited += delay
        delay = min(delay * 2, 0.5)
