"""The agent's post-import hooks (importhooks.py, through tables.when_imported):
a callback once a module is imported, now or later, without importing it;
the finder stays on sys.meta_path, inert."""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from probing_mcp_agent import tables  # noqa: E402


def test_when_imported(tmp_path, monkeypatch):
    pkg = tmp_path / "pmcw_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "sub.py").write_text("Y = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    tables.when_imported("pmcw_pkg.sub", lambda m: seen.append((m.__name__, m.Y)))
    assert tables._finder in sys.meta_path
    import pmcw_pkg.sub  # noqa: F401
    assert seen == [("pmcw_pkg.sub", 2)]
    m = sys.modules["pmcw_pkg.sub"]
    assert type(m.__loader__).__name__ == "SourceFileLoader" and m.__spec__.loader is m.__loader__
    # Inert, not removed: Python iterates sys.meta_path while it calls the
    # finder, and a removal would skip the next one.
    assert tables._finder.find_spec("pmcw_pkg.sub") is None
    assert sum(f is tables._finder for f in sys.meta_path) == 1
    tables.when_imported("pmcw_pkg", lambda m: seen.append(m.X))  # already imported: now
    assert seen[-1] == 1
    import importlib

    importlib.reload(pmcw_pkg.sub)  # no second call
    assert len(seen) == 2
    for k in ("pmcw_pkg.sub", "pmcw_pkg"):
        sys.modules.pop(k, None)


def test_when_imported_mid_import(tmp_path, monkeypatch):
    """Watched while the module is being imported by another thread (the
    background start-up registers its hooks while the program imports
    torch): the callback still runs, once, when the import ends."""
    import threading

    pkg = tmp_path / "pmcw_mid"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sub.py").write_text("import pmcw_gate\npmcw_gate.entered.set()\npmcw_gate.go.wait(60)\nY = 3\n")
    gate = type(sys)("pmcw_gate")
    gate.entered, gate.go = threading.Event(), threading.Event()
    monkeypatch.setitem(sys.modules, "pmcw_gate", gate)
    monkeypatch.syspath_prepend(str(tmp_path))
    t = threading.Thread(target=lambda: __import__("pmcw_mid.sub"))
    t.start()
    try:
        assert gate.entered.wait(60)
        seen = []
        tables.when_imported("pmcw_mid.sub", lambda m: seen.append(m.Y))
        assert seen == []  # not yet: its code is still running
    finally:
        gate.go.set()
        t.join(60)
    deadline = time.time() + 60  # a hang guard: the wait is on the callback
    while not seen and time.time() < deadline:
        time.sleep(0.01)
    assert seen == [3]
    for k in ("pmcw_mid.sub", "pmcw_mid"):
        sys.modules.pop(k, None)
