"""The recorders without torch: table registry and flusher (the post-import
hook: test_tables_importhooks.py),
collective wrappers (on a fake torch.distributed), step hook, spans, the
Flight Recorder conversion and watchdog hook, config keys, fork.

These run in the pytest process with the real core modules (runtime,
config); rings go to a per-test PROBING_DATA_DIR.
"""
import base64
import json
import os
import pickle
import sys
import threading
import time
import types

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from probing_mcp_agent import collectives, config, fr, frenv, memt, memtread, recorders, runtime, spans, steptiming, tables  # noqa: E402


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A fresh data dir and clean recorder state."""
    monkeypatch.setenv("PROBING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(runtime.state, "data_dir", None)
    tables.flush()
    tables.close_all()
    tables._queue.clear()
    tables._failed.clear()
    tables._enabled = True
    tables._ident[:] = [-1, -1, "", 0.0]
    collectives.set_enabled("on")
    collectives.set_sample_rate(1.0)
    spans.set_backends("memtable")
    steptiming.STEP[:] = [0, 0, 0, 1]
    steptiming._last_end[0] = None
    steptiming._owner = None
    yield tmp_path
    tables.flush()
    tables.close_all()
    collectives.unpatch()


def ring_rows(table):
    tables.flush()
    p = os.path.join(runtime.pid_dir(), "python." + table)
    if not os.path.exists(p):
        return [], []
    names, rows = memtread.read_rows(p)
    return names, [dict(zip(names, r)) for r in rows]


# -- registry ---------------------------------------------------------------------

def test_append_creates_schema_ring_lazily(env):
    p = os.path.join(runtime.pid_dir(), "python.comm_collective")
    assert not os.path.exists(p)
    assert tables.append("comm_collective", {"op": "all_reduce", "rank": 3, "bytes": 64})
    names, rows = ring_rows("comm_collective")
    assert names == [n for n, _, _ in tables.SCHEMAS["comm_collective"]]
    r = rows[0]
    assert r["op"] == "all_reduce" and r["rank"] == 3 and r["bytes"] == 64
    assert r["world_size"] == -1 and r["duration_ms"] == -1.0 and r["micro_batches"] == 1  # defaults
    assert abs(r["timestamp"] - time.time() * 1e6) < 60e6
    t = memtread.Table(p)
    assert t.ts_col == 1 and t.num_chunks == 8 and t.chunk_size == (8 << 20) // 8
    t.close()


def test_table_sizes(env, monkeypatch):
    tables.append("torch_step_timing", {})
    tables.append("trace_event", {})
    st = tables.stats()
    assert st["python.torch_step_timing"]["chunk_size"] * 8 == 2 << 20
    assert st["python.trace_event"]["chunk_size"] * 8 == 4 << 20
    tables.close_all()
    monkeypatch.setenv("PROBING_TABLE_DEFAULT_MB", "1")
    tables.append("comm_collective", {})
    assert tables.stats()["python.comm_collective"]["chunk_size"] * 8 == 1 << 20


def test_unknown_table_infers_schema(env):
    assert tables.append("my_metrics", {"n": 1, "x": 2.5, "s": "a", "ok": True, "blob": b"\x00",
                                        "record_id": None, "lat_ms": None, "note": None})
    names, rows = ring_rows("my_metrics")
    t = memtread.Table(os.path.join(runtime.pid_dir(), "python.my_metrics"))
    assert [(n, memt.DTYPE_NAMES[d]) for n, d in t.columns] == [
        ("timestamp", "I64"), ("n", "I64"), ("x", "F64"), ("s", "Str"), ("ok", "U8"), ("blob", "Bytes"),
        ("record_id", "I64"), ("lat_ms", "F64"), ("note", "Str")]
    t.close()
    # later rows are coerced; a bad value never raises
    assert tables.append("my_metrics", {"n": "7", "x": None, "s": 5, "ok": 0})
    assert tables.append("my_metrics", {"n": object()})
    _, rows = ring_rows("my_metrics")
    assert rows[1]["n"] == 7 and rows[1]["x"] == 0.0 and rows[1]["s"] == "5"
    assert rows[2]["n"] == 0


def test_unwritable_data_dir_never_raises(env, monkeypatch):
    monkeypatch.setenv("PROBING_DATA_DIR", "/proc/nope")
    assert tables.append("trace_event", {"name": "x"}) is False
    tables.defer("trace_event", (1, "event", 0, 0, "x", 1, 1, -1, "", "", "{}", "{}"))
    tables.flush()


def test_defer_flush_and_bound(env, monkeypatch):
    tables.defer("trace_event", (1, "event", 0, 0, "a", 1000, 1, -1, "", "", "{}", "{}"))
    p = os.path.join(runtime.pid_dir(), "python.trace_event")
    assert tables.flush() == 1
    assert [r[4] for r in memtread.read_rows(p)[1]] == ["a"]
    monkeypatch.setattr(tables, "QUEUE_MAX", 3)
    before = tables._qdropped[0]
    with tables._flush_lock:  # keep the flusher thread out while filling the queue
        for i in range(5):
            tables.defer("trace_event", (1, "event", 0, 0, "b%d" % i, 1000, 1, -1, "", "", "{}", "{}"))
        assert tables._qdropped[0] - before == 2
    tables.flush()
    assert [r[4] for r in memtread.read_rows(p)[1]] == ["a", "b0", "b1", "b2"]


def test_flusher_thread_writes_in_the_background(env, monkeypatch):
    monkeypatch.setattr(tables, "FLUSH_INTERVAL", 0.05)
    tables._start_flusher()
    tables._flush_ev.set()  # let it pick up the new interval
    tables.defer("trace_event", (1, "event", 0, 0, "bg", 1000, 1, -1, "", "", "{}", "{}"))
    p = os.path.join(runtime.pid_dir(), "python.trace_event")
    deadline = time.time() + 30  # a hang guard
    while time.time() < deadline:
        if os.path.exists(p) and memtread.read_rows(p)[1]:
            break
        time.sleep(0.02)
    assert [r[4] for r in memtread.read_rows(p)[1]] == ["bg"]
    assert tables.queue_stats()["flusher"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_records_nothing(env):
    assert tables.append("trace_event", {"name": "parent"})
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            ok = (tables.append("trace_event", {"name": "child"}) is False and not tables._rings
                  and collectives._on is False and tables.enabled() is False)
            tables.defer("trace_event", (1, "event", 0, 0, "child", 1, 1, -1, "", "", "{}", "{}"))
            ok = ok and tables.flush() == 0
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    os.close(r)
    assert got == b"1"
    _, rows = ring_rows("trace_event")
    assert [x["name"] for x in rows] == ["parent"]
    assert not os.path.exists(os.path.join(str(env / "data"), str(pid)))
    collectives.set_enabled("on")


# -- collectives (fake torch.distributed) ------------------------------------------------

class FakeDtype(object):
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __str__(self):
        return "torch." + self.name


F32 = FakeDtype("float32", 4)


class FakeTensor(object):
    def __init__(self, *shape, dtype=F32):
        self.shape, self.dtype = tuple(shape), dtype

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.numel() * self.element_size()


class PG(object):
    def __init__(self, ranks):
        self.ranks = ranks


def make_fake_dist(rank=1, world=4):
    d = types.ModuleType("fake_dist")
    world_pg = PG(list(range(world)))
    calls = []
    gate = {}

    def grp(g):
        return world_pg if g is None else g

    d.is_available = lambda: True
    d.is_initialized = lambda: True
    d.get_rank = lambda group=None: grp(group).ranks.index(rank)
    d.get_world_size = lambda group=None: len(grp(group).ranks)
    d.get_process_group_ranks = lambda g: list(g.ranks)
    d.get_global_rank = lambda g, r: grp(g).ranks[r]
    d._world = types.SimpleNamespace(default_pg=world_pg)
    d.GroupMember = types.SimpleNamespace(WORLD=world_pg)

    def all_reduce(tensor, op=None, group=None, async_op=False):
        calls.append("all_reduce")
        ev = gate.get("all_reduce")
        if ev is not None:
            ev.wait(10)
        return "work" if async_op else None

    def broadcast(tensor, src, group=None, async_op=False, group_src=None):
        calls.append("broadcast")

    def barrier(group=None, async_op=False, device_ids=None):
        calls.append("barrier")

    def all_gather(tensor_list, tensor, group=None, async_op=False):
        calls.append("all_gather")

    def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
        calls.append("isend")
        return "w"

    def irecv(tensor, src=None, group=None, tag=0, group_src=None):
        calls.append("irecv")
        return "w"

    def batch_isend_irecv(p2p_op_list):
        calls.append("batch")
        return [op.op(op.tensor, op.peer, op.group) for op in p2p_op_list]

    def destroy_process_group(group=None):
        calls.append("destroy")

    for f in (all_reduce, broadcast, barrier, all_gather, isend, irecv, batch_isend_irecv, destroy_process_group):
        setattr(d, f.__name__, f)
    d.calls, d.gate, d.world_pg = calls, gate, world_pg
    return d


@pytest.fixture
def fake_dist(env, monkeypatch):
    d = make_fake_dist()
    monkeypatch.setitem(sys.modules, "torch.distributed", d)
    monkeypatch.delitem(sys.modules, "torch.distributed.distributed_c10d", raising=False)
    assert collectives.patch(d) >= 7
    yield d
    collectives.unpatch()


def test_collective_rows(fake_dist):
    d = fake_dist
    sub = PG([1, 3])
    t = FakeTensor(4, 3)
    steptiming.STEP[:] = [10, 5, 5, 2]
    d.all_reduce(t)
    d.all_reduce(t, group=sub, async_op=True)
    d.broadcast(FakeTensor(7), 0)
    d.barrier()
    d.all_gather([FakeTensor(2), FakeTensor(2)], FakeTensor(2), group=d.world_pg)
    assert d.calls == ["all_reduce", "all_reduce", "broadcast", "barrier", "all_gather"]
    names, rows = ring_rows("comm_collective")
    assert names[-2:] == ["group_seq", "peer"] and len(names) == 19
    got = [(r["op"], r["group_rank"], r["group_size"], r["participate_ranks"], r["tensor_shape"],
            r["tensor_dtype"], r["bytes"], r["async_op"], r["group_seq"]) for r in rows]
    assert got == [
        ("all_reduce", 1, 4, "[0, 1, 2, 3]", "(4, 3)", "torch.float32", 48, 0, 1),
        ("all_reduce", 0, 2, "[1, 3]", "(4, 3)", "torch.float32", 48, 1, 1),
        ("broadcast", 1, 4, "[0, 1, 2, 3]", "(7,)", "torch.float32", 28, 0, 2),
        ("barrier", 1, 4, "[0, 1, 2, 3]", "", "", 0, 0, 3),
        ("all_gather", 1, 4, "[0, 1, 2, 3]", "(2,)", "torch.float32", 8, 0, 4),  # group=WORLD == None
    ]
    for r in rows:
        assert (r["rank"], r["world_size"]) == (1, 4)
        assert (r["micro_step"], r["local_step"], r["global_step"], r["micro_batches"]) == (10, 5, 5, 2)
        assert r["duration_ms"] >= 0
        assert abs(r["timestamp"] - time.time() * 1e6) < 60e6


def test_batch_p2p_is_one_row_per_operation(fake_dist):
    d = fake_dist
    P2POp = types.SimpleNamespace
    ops = [P2POp(op=d.isend, tensor=FakeTensor(8), peer=2, group=None),
           P2POp(op=d.irecv, tensor=FakeTensor(8), peer=0, group=None)]
    d.batch_isend_irecv(ops)
    d.isend(FakeTensor(3), 2)
    _, rows = ring_rows("comm_collective")
    assert [(r["op"], r["tensor_shape"], r["bytes"], r["async_op"], r["peer"], r["group_seq"]) for r in rows] == [
        ("isend", "(8,)", 32, 1, 2, 1), ("irecv", "(8,)", 32, 1, 0, 1), ("isend", "(3,)", 12, 1, 2, 2)]
    assert d.calls == ["batch", "isend", "irecv", "isend"]


def test_p2p_counts_per_peer_and_direction(fake_dist):
    """The k-th send to a peer is numbered k, whatever else the rank called:
    a receiver's k-th receive from it pairs with it, and the group's own
    collectives keep one count on every member."""
    d = fake_dist
    sub = PG([1, 3])
    d.all_reduce(FakeTensor(2))
    d.isend(FakeTensor(2), 2)
    d.isend(FakeTensor(2), dst=0)
    d.irecv(FakeTensor(2), 2)
    d.isend(FakeTensor(2), group=sub, group_dst=1)  # group rank 1 of [1, 3] is global rank 3
    d.irecv(FakeTensor(2))  # from any rank
    d.isend(FakeTensor(2), 2)
    d.all_reduce(FakeTensor(2))
    _, rows = ring_rows("comm_collective")
    got = [(r["op"], r["peer"], r["group_seq"]) for r in rows]
    assert got == [("all_reduce", -1, 1), ("isend", 2, 1), ("isend", 0, 1), ("irecv", 2, 1),
                   ("isend", 3, 1), ("irecv", -1, 1), ("isend", 2, 2), ("all_reduce", -1, 2)]


def test_sampling_and_switch(fake_dist):
    d = fake_dist
    t = FakeTensor(1)
    collectives.set_sample_rate(0.0)
    d.all_reduce(t)
    d.all_reduce(t)
    collectives.set_sample_rate(1.0)
    d.all_reduce(t)
    collectives.set_enabled("off")
    d.all_reduce(t)
    collectives.set_enabled("on")
    d.all_reduce(t)
    _, rows = ring_rows("comm_collective")
    # unsampled calls still count in group_seq; calls while off do not
    assert [r["group_seq"] for r in rows] == [3, 4]
    assert d.calls.count("all_reduce") == 5


def test_in_flight_row_has_no_duration_until_it_returns(fake_dist):
    d = fake_dist
    ev = threading.Event()
    d.gate["all_reduce"] = ev
    th = threading.Thread(target=d.all_reduce, args=(FakeTensor(5),))
    th.start()
    try:
        deadline = time.time() + 30  # a hang guard
        rows = []
        while time.time() < deadline and not rows:
            time.sleep(0.01)
            _, rows = ring_rows("comm_collective")
        assert len(rows) == 1 and rows[0]["duration_ms"] == -1.0  # stuck inside the collective
    finally:
        time.sleep(0.05)
        ev.set()
        th.join(5)
    _, rows = ring_rows("comm_collective")
    assert len(rows) == 1 and rows[0]["duration_ms"] >= 40.0  # patched in place when it returned


def test_destroy_drops_group_cache(fake_dist):
    d = fake_dist
    d.all_reduce(FakeTensor(1))
    assert collectives._wentry is not None
    d.destroy_process_group()
    assert collectives._wentry is None and not collectives._gcache
    d.all_reduce(FakeTensor(1))
    _, rows = ring_rows("comm_collective")
    assert [r["group_seq"] for r in rows] == [1, 1]  # a new world, a new count


def test_patch_is_idempotent_and_unpatch_restores(fake_dist):
    d = fake_dist
    w = d.all_reduce
    assert collectives.patch(d) == 0 and d.all_reduce is w
    orig = w.__probing_mcp_wrapped__
    collectives.unpatch()
    assert d.all_reduce is orig


# -- step timing ----------------------------------------------------------------------

def test_step_hook_counts_first_optimizer(env, monkeypatch):
    monkeypatch.setenv("PROBING_MICRO_BATCHES", "4")
    installed = []
    fake = types.SimpleNamespace(register_optimizer_step_post_hook=lambda h: installed.append(h) or
                                 types.SimpleNamespace(remove=lambda: installed.remove(h)))
    steptiming.uninstall()
    steptiming.install()
    steptiming._install_hooks(fake)
    assert installed == [steptiming._post_hook]

    class Opt(object):
        pass
    a, b = Opt(), Opt()
    hook = installed[0]
    for _ in range(3):
        hook(a, (), {})
        hook(b, (), {})  # not counted
        time.sleep(0.01)
    assert steptiming.current() == (12, 3, 3, 4)
    names, rows = ring_rows("torch_step_timing")
    assert names == [n for n, _, _ in tables.SCHEMAS["torch_step_timing"]]
    assert [(r["micro_step"], r["local_step"], r["global_step"], r["micro_batches"]) for r in rows] == [
        (0, 0, 0, 4), (4, 1, 1, 4), (8, 2, 2, 4)]
    assert rows[0]["step_duration_sec"] == -1.0 and all(r["step_duration_sec"] > 0.005 for r in rows[1:])
    assert rows[0]["sample_mode"] == "optimizer_hook" and rows[0]["is_shadow"] == 0
    steptiming.set_step(global_step=100)
    assert steptiming.current() == (400, 100, 100, 4)
    steptiming.uninstall()
    assert installed == []


# -- spans -------------------------------------------------------------------------------

def test_spans_and_events(env):
    with spans.span("step", phase="train", k=1) as outer:
        spans.event("tick", n=1)
        with spans.span("forward") as inner:
            inner.set(tokens=7)
        outer.event("mark")
    with pytest.raises(ValueError):
        with spans.span("bad"):
            raise ValueError("boom")

    @spans.span("load", phase="data")
    def load(x):
        return x * 2
    assert load(21) == 42

    @spans.span
    def plain():
        spans.event("inside")
    plain()
    spans.event("free")
    _, rows = ring_rows("trace_event")
    kinds = [(r["record_type"], r["name"]) for r in rows]
    assert kinds == [("span_start", "step"), ("event", "tick"), ("span_start", "forward"),
                     ("span_end", "forward"), ("event", "mark"), ("span_end", "step"),
                     ("span_start", "bad"), ("span_end", "bad"), ("span_start", "load"), ("span_end", "load"),
                     ("span_start", "test_spans_and_events.<locals>.plain"), ("event", "inside"),
                     ("span_end", "test_spans_and_events.<locals>.plain"), ("event", "free")]
    step, fwd = rows[0], rows[2]
    assert step["parent_id"] == -1 and step["trace_id"] == step["span_id"] > 0
    assert fwd["parent_id"] == step["span_id"] and fwd["trace_id"] == step["trace_id"]
    assert fwd["phase"] == "train"  # inherited
    assert rows[1]["span_id"] == step["span_id"] and json.loads(rows[1]["event_attributes"]) == {"n": 1}
    end_fwd = json.loads(rows[3]["attributes"])
    assert end_fwd["tokens"] == 7 and end_fwd["duration_ms"] >= 0
    assert json.loads(rows[7]["attributes"])["error"] == "ValueError: boom"
    assert rows[8]["phase"] == "data"
    assert rows[-1]["span_id"] == 0 and rows[-1]["parent_id"] == -1
    assert all(r["thread_id"] == threading.get_ident() for r in rows)
    assert all(abs(r["time"] / 1000 - r["timestamp"]) < 2 for r in rows)


def test_span_backends(env):
    spans.set_backends("none")
    with spans.span("quiet"):
        spans.event("e")
    assert ring_rows("trace_event")[1] == []
    spans.set_backends("logger")
    # A handler on the span logger itself: the agent's own logger does not
    # propagate to the root (where pytest's caplog listens before pytest 9)
    # once its stderr handler exists, which an earlier test may have made.
    import logging
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    span_log = logging.getLogger("probing_mcp_agent.span")
    keep, old_level = Keep(), span_log.level
    span_log.addHandler(keep)
    span_log.setLevel(logging.INFO)
    try:
        with spans.span("logged"):
            pass
    finally:
        span_log.removeHandler(keep)
        span_log.setLevel(old_level)
    assert ring_rows("trace_event")[1] == []
    assert any("span_start logged" in m for m in seen), seen
    spans.set_backends("otel,bogus")  # fall back to memtable
    with spans.span("mem"):
        pass
    assert [r["name"] for r in ring_rows("trace_event")[1]] == ["mem", "mem"]
    spans.set_location("on")
    with spans.span("where"):
        pass
    spans.set_location("off")
    loc = ring_rows("trace_event")[1][-1]["location"]
    assert loc.startswith(__file__) and ":" in loc


# -- Flight Recorder -----------------------------------------------------------------------

def gloo_like_dump():
    frames = [{"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 4174},
              {"name": "train_step", "filename": "train.py", "line": 88}]
    e1 = {"frames": frames, "record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"),
          "thread_name": "python", "thread_id": "1", "collective_seq_id": 1, "p2p_seq_id": 0, "op_id": 1,
          "profiling_name": "gloo:all_reduce", "time_created_ns": 1767225600123456789,
          "input_sizes": [[4, 3]], "input_dtypes": ["Float"], "output_sizes": [[4, 3]],
          "output_dtypes": ["Float"], "state": "completed", "time_discovered_started_ns": None,
          "time_discovered_completed_ns": 1767225600124000000, "retired": True, "timeout_ms": 1800000,
          "is_p2p": False, "duration_ms": 1.5}
    e2 = dict(e1, record_id=1, pg_id=1, process_group=("1", "undefined"), collective_seq_id=1, op_id=2,
              state="scheduled", retired=False, time_discovered_completed_ns=None, frames=[])
    del e2["duration_ms"]
    return {"version": "2.10", "pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1]"}},
            "comm_lib_version": "", "pg_status": {
                "0": {"last_enqueued_collective": 1, "last_started_collective": -1, "last_completed_collective": 1},
                "1": {"last_enqueued_collective": 1, "last_started_collective": -1, "last_completed_collective": 0},
                "7": {"last_enqueued_collective": -1, "last_started_collective": -1, "last_completed_collective": -1}},
            "entries": [e1, e2]}


def test_fr_rows_follow_the_missing_value_rules():
    fr_rows, pg_rows = fr.rows(gloo_like_dump(), snapshot_id=42, rank=2, world_size=4, ts_us=5)
    a, b = fr_rows
    assert (a["snapshot_id"], a["rank"], a["world_size"], a["timestamp"]) == (42, 2, 4, 5)
    assert (a["pg_id"], a["pg_name"], a["pg_desc"]) == ("0", "0", "default_pg")
    assert a["input_sizes"] == "[[4, 3]]" and a["input_dtypes"] == '["Float"]'
    assert a["time_discovered_started_ns"] == -1 and a["time_discovered_completed_ns"] == 1767225600124000000
    assert a["duration_ns"] == 1500000 and a["retired"] == 1 and a["is_p2p"] == 0
    assert json.loads(a["frames"])[1] == {"name": "train_step", "filename": "train.py", "line": 88}
    assert a["top_frame"] == "all_reduce (torch/distributed/distributed_c10d.py:4174)"
    assert (b["pg_id"], b["pg_desc"], b["duration_ns"], b["frames"], b["top_frame"]) == ("1", "undefined", -1, "", "")
    assert b["time_discovered_completed_ns"] == -1 and b["state"] == "scheduled"
    assert [(p["pg_id"], p["pg_name"], p["pg_desc"], p["last_enqueued_collective"], p["last_completed_collective"])
            for p in pg_rows] == [("0", "0", "default_pg", 1, 1), ("1", "1", "undefined", 1, 0),
                                  ("7", "7", "", -1, -1)]
    # JSON dumps: 0 = no timestamp, counters as strings
    j = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
         "pg_status": {"0": {"last_enqueued_collective": "3", "last_started_collective": "-1",
                             "last_completed_collective": "2"}},
         "entries": [{"record_id": 5, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 3,
                      "time_created_ns": 0, "time_discovered_started_ns": 0, "time_discovered_completed_ns": 0}]}
    fr_rows, pg_rows = fr.rows(j, 1, 0, 2)
    assert fr_rows[0]["time_created_ns"] == -1 and fr_rows[0]["time_discovered_completed_ns"] == -1
    assert fr_rows[0]["op_id"] == -1 and fr_rows[0]["profiling_name"] == "" and fr_rows[0]["input_sizes"] == ""
    assert pg_rows == [dict(pg_rows[0], pg_id="0", pg_name="0", pg_desc="default_pg", ranks="[0, 1]",
                            last_enqueued_collective=3, last_started_collective=-1, last_completed_collective=2)]


def test_snapshot_without_torch(env, monkeypatch):
    for m in ("torch", "torch.distributed"):
        monkeypatch.delitem(sys.modules, m, raising=False)
    with pytest.raises(fr.SnapshotError, match="torch is not imported"):
        fr.snapshot()


def fake_torch(monkeypatch, backend="gloo", nccl=None, generic=None, initialized=True):
    dump = gloo_like_dump()
    calls = []
    c10d = types.SimpleNamespace()

    def mk(name, data):
        def f(includeCollectives=True, includeStackTraces=True, onlyActive=False, backend=None):
            calls.append((name, includeStackTraces, onlyActive, backend))
            return data() if callable(data) else data
        return f
    if nccl is not None:
        c10d._dump_nccl_trace = mk("_dump_nccl_trace", pickle.dumps(nccl))
        c10d._dump_nccl_trace_json = mk("_dump_nccl_trace_json", json.dumps(nccl).encode())
    if generic is not False:
        d = generic or dump
        c10d._dump_fr_trace = mk("_dump_fr_trace", pickle.dumps(d))
        c10d._dump_fr_trace_json = mk("_dump_fr_trace_json", json.dumps(d).encode())
    torch = types.ModuleType("torch")
    torch._C = types.SimpleNamespace(_distributed_c10d=c10d)
    dist = types.ModuleType("torch.distributed")
    dist.is_available = lambda: True
    dist.is_initialized = lambda: initialized
    dist.get_backend = lambda: backend
    dist.get_rank = lambda: 2
    dist.get_world_size = lambda: 4
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    monkeypatch.delitem(sys.modules, "torch.distributed.distributed_c10d", raising=False)
    return calls, dump


def test_snapshot_generic_recorder_round_trip(env, monkeypatch):
    calls, dump = fake_torch(monkeypatch, nccl={"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": []})
    r = fr.snapshot(raw=True)
    assert list(r) == sorted(r)
    assert r["ok"] and r["records"] == 2 and r["process_groups"] == 3 and r["rank"] == 2 and r["world_size"] == 4
    assert r["dump_function"] == "_dump_fr_trace" and r["format"] == "pickle" and r["version"] == "2.10"
    assert pickle.loads(base64.b64decode(r["data_b64"])) == dump and r["bytes"] == len(pickle.dumps(dump))
    assert calls == [("_dump_fr_trace", True, False, "gloo")]  # gloo job: the NCCL recorder is not asked
    _, fr_rows = ring_rows("torch_nccl_flight_record")
    _, pg_rows = ring_rows("torch_nccl_pg_status")
    assert len(fr_rows) == 2 and len(pg_rows) == 3 and r["persisted"] == 5
    assert {x["snapshot_id"] for x in fr_rows + pg_rows} == {r["snapshot_id"]}
    assert fr_rows[0]["rank"] == 2 and fr_rows[0]["profiling_name"] == "gloo:all_reduce"
    r2 = fr.snapshot(fmt="json", only_active=True, persist=False)
    assert r2["dump_function"] == "_dump_fr_trace_json" and "data_b64" not in r2 and r2["records"] == 2
    assert len(ring_rows("torch_nccl_flight_record")[1]) == 2  # not persisted


def test_snapshot_prefers_nccl_and_falls_back(env, monkeypatch):
    nccl = dict(gloo_like_dump(), version="2.9")
    calls, _ = fake_torch(monkeypatch, backend="cpu:gloo,cuda:nccl", nccl=nccl)
    assert fr.snapshot(persist=False)["dump_function"] == "_dump_nccl_trace"
    # an empty NCCL recorder (gloo collectives only) -> the generic one
    calls, _ = fake_torch(monkeypatch, backend="cpu:gloo,cuda:nccl",
                          nccl={"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": []})
    r = fr.snapshot(persist=False)
    assert r["dump_function"] == "_dump_fr_trace" and calls[-1][3] == "gloo"


def test_snapshot_errors(env, monkeypatch):
    empty = {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": []}
    fake_torch(monkeypatch, generic=empty, initialized=False)
    with pytest.raises(fr.SnapshotError, match="no process group"):
        fr.snapshot()
    fake_torch(monkeypatch, generic=empty)
    with pytest.raises(fr.SnapshotError, match="TORCH_FR_BUFFER_SIZE"):
        fr.snapshot()
    fake_torch(monkeypatch, generic=False)
    with pytest.raises(fr.SnapshotError, match="no Flight Recorder dump function"):
        fr.snapshot()
    with pytest.raises(fr.SnapshotError, match="format"):
        fr.snapshot(fmt="xml")
    assert fr.last["ok"] is False


def test_is_watchdog_error():
    yes = [RuntimeError("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)"),
           RuntimeError("[/x/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
                        "3000ms for recv operation to complete"),
           RuntimeError("NCCL communicator was aborted, watchdog thread terminated"),
           TimeoutError("c10d collective timed out")]
    no = [RuntimeError("CUDA out of memory"), ValueError("watchdog"), KeyboardInterrupt(),
          TimeoutError("read timed out")]
    for e in yes:
        assert fr.is_watchdog_error(e), e
    for e in no:
        assert not fr.is_watchdog_error(e), e
    try:
        try:
            raise RuntimeError("Timed out waiting 100ms for recv operation to complete (gloo)")
        except RuntimeError as inner:
            raise ValueError("wrapped") from inner
    except ValueError as outer:
        assert fr.is_watchdog_error(outer)


def test_watchdog_hooks_snapshot_and_chain(env, monkeypatch):
    snaps = []
    monkeypatch.setattr(fr, "snapshot", lambda *a, **k: snaps.append(k) or {"snapshot_id": 1})
    prev = []
    monkeypatch.setattr(sys, "excepthook", lambda *a: prev.append(a[1]))
    prev_t = []
    monkeypatch.setattr(threading, "excepthook", lambda args: prev_t.append(args.exc_value))
    fr.install_watchdog_hook()
    fr.install_watchdog_hook()  # idempotent
    try:
        fr.set_on_watchdog("auto")
        e = RuntimeError("Timed out waiting 3000ms for recv operation to complete [gloo]")
        sys.excepthook(RuntimeError, e, None)
        assert prev == [e] and snaps == [{"include_stack_traces": True, "only_active": True, "persist": True, "wait": 0}]
        sys.excepthook(ValueError, ValueError("unrelated"), None)
        assert len(snaps) == 1 and len(prev) == 2

        def boom():
            raise RuntimeError("Watchdog caught collective operation timeout")
        th = threading.Thread(target=boom)
        th.start()
        th.join()
        assert len(snaps) == 2 and len(prev_t) == 1
        fr.set_on_watchdog("off")
        sys.excepthook(RuntimeError, e, None)
        assert len(snaps) == 2 and len(prev) == 3
    finally:
        fr.set_on_watchdog("auto")
        fr.uninstall_watchdog_hook()


def test_configure_env(env, monkeypatch):
    pid_dir = runtime.pid_dir()
    monkeypatch.setattr(frenv, "torch_version_on_disk", lambda: (2, 15))
    e = {}
    got = fr.configure_env(e)
    assert got == {"TORCH_FR_BUFFER_SIZE": "2000",
                   "TORCH_FR_DUMP_TEMP_FILE": os.path.join(pid_dir, "fr_dump_rank_"),
                   "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": os.path.join(pid_dir, "fr_pipe_")}
    # ... and names who set the path defaults, for the children (per-rank prefixes)
    assert e == dict(got, PROBING_MCP_FR_DEFAULTS="%d:TORCH_FR_DUMP_TEMP_FILE,TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
                     % os.getpid())
    monkeypatch.setattr(frenv, "torch_version_on_disk", lambda: (2, 5))
    e = {}
    fr.configure_env(e)
    assert set(e) == {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                      "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "PROBING_MCP_FR_DEFAULTS"}
    monkeypatch.setattr(frenv, "torch_version_on_disk", lambda: None)
    e = {}
    fr.configure_env(e)
    assert e["TORCH_FR_BUFFER_SIZE"] == e["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    # the user's values win, including 0 (FR off)
    e = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0", "TORCH_FR_DUMP_TEMP_FILE": "/x/y_",
         "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/p_"}
    assert fr.configure_env(e) == {}


def test_torch_version_on_disk(tmp_path, monkeypatch):
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    (pkg / "version.py").write_text("__version__ = '2.7.1+cpu'\ngit_version = 'x'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert fr.torch_version_on_disk() == (2, 7)
    assert "torch" not in sys.modules


# -- config -------------------------------------------------------------------------------

def test_config_keys(env, monkeypatch):
    monkeypatch.setenv("PROBING_FR_ON_WATCHDOG", "off")
    monkeypatch.setenv("PROBING_SAMPLE_RATE", "0.25")
    try:
        recorders.register_config()
        keys = dict((k["key"], k) for k in config.keys())
        for k in ("probing.comm.collectives", "probing.sample_rate", "probing.step_timing", "probing.span.backends",
                  "probing.span.location", "probing.fr.on_watchdog", "probing.tables.flush_interval"):
            assert keys[k]["settable"] and keys[k]["doc"], k
        assert fr._on_watchdog == "off" and config.get("probing.fr.on_watchdog") == "off"
        assert collectives._rate == 0.25
        config.set("probing.comm.collectives", "0")
        assert collectives._on is False and config.get("probing.comm.collectives") == "off"
        config.set("probing.comm.collectives", "yes")
        assert collectives._on is True
        with pytest.raises(config.ConfigError):
            config.set("probing.sample_rate", "2")
        config.set("probing.span.backends", "logger, memtable")
        assert spans._log and spans._mem
        config.set("probing.step_timing", "off")
        assert steptiming._enabled is False
        config.set("probing.tables.flush_interval", "0.2")
        assert tables.FLUSH_INTERVAL == 0.2
        with pytest.raises(config.ConfigError):
            config.set("probing.fr.on_watchdog", "maybe")
    finally:
        for k, v in (("probing.comm.collectives", "on"), ("probing.sample_rate", "1.0"),
                     ("probing.span.backends", "memtable"), ("probing.step_timing", "on"),
                     ("probing.fr.on_watchdog", "auto"), ("probing.tables.flush_interval", "0.5")):
            config.set(k, v)


def test_record_collective_without_torch(env):
    """A job that synchronises by its own means records its collectives
    like torch's: one row per call, the group named by its members,
    group_seq counting the calls, -1 while the call runs."""
    import probing_mcp_agent

    tables._ident[:] = [2, 4, "", time.monotonic() + 60]
    for _ in range(3):
        with probing_mcp_agent.record_collective("all_reduce", [3, 2, 1, 0]):
            pass
    rec = probing_mcp_agent.record_collective("all_reduce", [2, 3])
    rec.__enter__()
    _, rows = ring_rows("comm_collective")
    assert [r["group_seq"] for r in rows] == [1, 2, 3, 1]
    assert rows[0]["participate_ranks"] == "[0, 1, 2, 3]" and rows[0]["group_rank"] == 2 and rows[0]["rank"] == 2
    assert rows[0]["duration_ms"] >= 0 and rows[3]["duration_ms"] == -1.0  # still inside it
    assert rows[3]["participate_ranks"] == "[2, 3]" and rows[3]["group_rank"] == 0
    rec.__exit__(None, None, None)
    _, rows = ring_rows("comm_collective")
    assert rows[3]["duration_ms"] != -1.0  # patched in place when it returned
    collectives.set_enabled("off")
    with probing_mcp_agent.record_collective("all_reduce", [0, 1]):
        pass
    assert len(ring_rows("comm_collective")[1]) == 4
