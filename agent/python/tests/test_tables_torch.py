"""Real torch.distributed (gloo, CPU) jobs with the agent's recorders on.

Each rank is a subprocess of $PROBING_TEST_TORCH_PYTHON (default
/root/devenv/bin/python, else the python running pytest) that activates
the agent the way an installed one does (probing_mcp_agent.activate():
fr.configure_env(), recorders.start(), fr.install_watchdog_hook()) before it
imports torch. Skipped, with the reason, when that interpreter has no
torch with gloo.

* test_train_*: 4 ranks train a tiny model (all_reduce per gradient,
  broadcast, barrier, a 2-rank subgroup, spans, optimizer steps, a ring
  of send/recv and one batch_isend_irecv), then
  snapshot their Flight Recorder (persist, raw); the rings are read back
  with memtread.py's reader and, when Go is available, with the Go reader
  (go run ./cmd/probing-mcp query).
* test_hang_*: rank 2 skips one all_reduce; while the others hang in it,
  their rings already show the collective in flight (duration_ms -1);
  gloo's timeout then raises in ranks 0, 1, 3 and the watchdog hook
  persists their FR snapshot; rank 2 snapshots itself. pg_status and the
  FR rows show rank 2 one collective behind.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
AGENT_PY = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(AGENT_PY))
sys.path.insert(0, AGENT_PY)

from probing_mcp_agent import memtread  # noqa: E402

WORLD = 4
HANG_TIMEOUT_S = 6


def torch_python():
    cands = [os.environ.get("PROBING_TEST_TORCH_PYTHON"), "/root/devenv/bin/python", sys.executable]
    why = []
    for py in cands:
        if not py or not os.path.exists(py):
            continue
        try:
            out = subprocess.run([py, "-c", "import torch, torch.distributed as d; "
                                  "print(torch.__version__, d.is_available() and d.is_gloo_available())"],
                                 capture_output=True, text=True, timeout=120)
        except Exception as e:  # pragma: no cover
            why.append("%s: %s" % (py, e))
            continue
        if out.returncode == 0 and out.stdout.strip().endswith("True"):
            return py, out.stdout.split()[0]
        why.append("%s: %s" % (py, (out.stderr.strip().splitlines() or ["no gloo"])[-1]))
    pytest.skip("no Python with torch + gloo (set PROBING_TEST_TORCH_PYTHON): " + "; ".join(why))


WORKER = r'''
import datetime, json, os, sys, threading, time
sys.path.insert(0, os.environ["AGENT_PY"])
# An agent installed into this interpreter (its .pth imports the package
# at start, inactive without PROBING) would shadow the source under test.
for _m in [m for m in sys.modules if m.split(".")[0] == "probing_mcp_agent"]:
    del sys.modules[_m]
import probing_mcp_agent
assert probing_mcp_agent.__file__.startswith(os.environ["AGENT_PY"]), probing_mcp_agent.__file__
from probing_mcp_agent import fr, recorders, spans, tables
if hasattr(probing_mcp_agent, "activate"):
    assert probing_mcp_agent.activate(), "activation failed"
else:  # the core's sequence
    fr.configure_env(); recorders.start(); fr.install_watchdog_hook()
tables.set_flush_interval(0.1)

import torch
import torch.distributed as dist

mode, out = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
timeout = datetime.timedelta(seconds=float(os.environ.get("HANG_TIMEOUT_S", "60")))
dist.init_process_group("gloo", timeout=timeout)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def train_step(step, skip=False):
    with spans.span("step", phase="train", step=step):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            if skip and p is list(model.parameters())[-1]:
                return False  # the bug: this rank skips the last gradient all_reduce
            dist.all_reduce(p.grad)
        opt.step()
    return True


def dump(name, obj):
    with open(os.path.join(out, "%s%d.json" % (name, rank)), "w") as f:
        json.dump(obj, f)


if mode == "train":
    sub = dist.new_group([0, 1])
    w = None
    for step in range(6):
        train_step(step)
        dist.broadcast(torch.arange(3.0), 0)
        if step % 2 == 1:
            dist.barrier()
        if rank in (0, 1) and step == 2:
            dist.all_reduce(torch.ones(5), group=sub)
        if step == 4:
            w = dist.all_reduce(torch.ones(2), async_op=True)
    w.wait()
    # a ring of point-to-point messages: 2 blocking rounds, then one batch
    ws = dist.get_world_size()
    nxt, prv = (rank + 1) % ws, (rank - 1) % ws
    for i in range(2):
        buf = torch.zeros(3)
        if rank % 2 == 0:
            dist.send(torch.full((3,), float(rank)), nxt)
            dist.recv(buf, prv)
        else:
            dist.recv(buf, prv)
            dist.send(torch.full((3,), float(rank)), nxt)
    ops = [dist.P2POp(dist.isend, torch.ones(2), nxt), dist.P2POp(dist.irecv, torch.zeros(2), prv)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    spans.event("done", steps=6)
    reply = fr.snapshot(fmt="pickle", include_stack_traces=True, only_active=False, persist=True, raw=True)
    reply["data_len"] = len(reply.pop("data_b64"))
    dump("reply", reply)
    dist.barrier()
    dist.destroy_process_group()
elif mode == "hang":
    for step in range(3):
        train_step(step)
    dump("ready", {"pid": os.getpid()})
    if rank == int(os.environ.get("CULPRIT", "2")):
        train_step(3, skip=True)
        # stuck elsewhere (a "checkpoint") until the peers gave up, then
        # the server's snapshot request, as the MCP tool would send it
        time.sleep(float(os.environ["HANG_TIMEOUT_S"]) + 4)
        dump("reply", fr.snapshot(persist=True))
        os._exit(0)
    train_step(3)  # hangs in the last all_reduce; gloo times out; uncaught -> watchdog hook
    dump("unexpected", {})
'''


def run_job(py, mode, env_extra=None, timeout=150):
    work = tempfile.mkdtemp(prefix="pmt-", dir="/tmp")
    data, out, ctrl = os.path.join(work, "data"), os.path.join(work, "out"), os.path.join(work, "c")
    os.makedirs(out)
    script = os.path.join(work, "worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    base = dict((k, v) for k, v in os.environ.items()
                if not k.startswith(("PROBING", "TORCH_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_")))
    for r in range(WORLD):
        env = dict(base, AGENT_PY=AGENT_PY, RANK=str(r), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PROBING_DATA_DIR=data, PROBING_CTRL_ROOT=ctrl, PYTHONUNBUFFERED="1",
                   OMP_NUM_THREADS="1", **(env_extra or {}))
        log = open(os.path.join(work, "rank%d.log" % r), "w")
        procs.append(subprocess.Popen([py, script, mode, out], env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
    return Job(work, data, out, procs, timeout)


class Job(object):
    def __init__(self, work, data, out, procs, timeout):
        self.work, self.data, self.out, self.procs, self.timeout = work, data, out, procs, timeout

    def wait(self):
        deadline = time.time() + self.timeout
        try:
            for p in self.procs:
                p.wait(max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            pass
        finally:
            self.kill()
        return [p.returncode for p in self.procs]

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait(10)

    def logs(self):
        txt = []
        for r in range(WORLD):
            with open(os.path.join(self.work, "rank%d.log" % r)) as f:
                txt.append("--- rank %d\n%s" % (r, f.read()[-3000:]))
        return "\n".join(txt)

    def result(self, name, rank):
        p = os.path.join(self.out, "%s%d.json" % (name, rank))
        if not os.path.exists(p):
            return None
        with open(p) as f:
            return json.load(f)

    def rows(self, pid, table):
        p = os.path.join(self.data, str(pid), "python." + table)
        if not os.path.exists(p):
            return []
        names, rows = memtread.read_rows(p)
        return [dict(zip(names, r)) for r in rows]

    def cleanup(self):
        self.kill()
        shutil.rmtree(self.work, ignore_errors=True)


@pytest.fixture(scope="module")
def train_job():
    py, version = torch_python()
    job = run_job(py, "train")
    rc = job.wait()
    if rc != [0] * WORLD:
        logs = job.logs()
        job.cleanup()
        pytest.fail("train job failed: exit codes %s\n%s" % (rc, logs))
    job.version = version
    job.pids = [p.pid for p in job.procs]
    yield job
    job.cleanup()


def test_train_collective_rows(train_job):
    job = train_job
    nparams = 4
    per_rank = {}
    for r, pid in enumerate(job.pids):
        rows = job.rows(pid, "comm_collective")
        per_rank[r] = rows
        assert rows, "rank %d wrote no python.comm_collective" % r
        assert {(x["rank"], x["world_size"]) for x in rows} == {(r, WORLD)}
        ops = [x["op"] for x in rows]
        sub = 1 if r in (0, 1) else 0
        # 6 steps x (4 all_reduce + broadcast) + 3 barriers + async all_reduce + subgroup + 2 barriers at the end
        # (the snapshot's own barrier and destroy's) -- count what the script issues
        assert ops.count("broadcast") == 6 and ops.count("barrier") >= 3
        assert ops.count("all_reduce") == 6 * nparams + 1 + sub
        p2p = [(x["op"], x["peer"], x["group_seq"], x["async_op"]) for x in rows if x["peer"] >= 0]
        nxt, prv = (r + 1) % WORLD, (r - 1) % WORLD
        rounds = [[("send", nxt, i, 0), ("recv", prv, i, 0)] if r % 2 == 0 else [("recv", prv, i, 0), ("send", nxt, i, 0)]
                  for i in (1, 2)]
        assert p2p == rounds[0] + rounds[1] + [("isend", nxt, 3, 1), ("irecv", prv, 3, 1)]
        world = [x for x in rows if x["participate_ranks"] == "[0, 1, 2, 3]" and x["peer"] < 0]
        assert [x["group_seq"] for x in world] == list(range(1, len(world) + 1))
        assert all(x["group_rank"] == r and x["group_size"] == WORLD for x in world)
        subrows = [x for x in rows if x["participate_ranks"] == "[0, 1]"]
        assert len(subrows) == sub
        if sub:
            assert (subrows[0]["group_seq"], subrows[0]["group_size"], subrows[0]["tensor_shape"]) == (1, 2, "(5,)")
        grads = [x for x in rows if x["op"] == "all_reduce" and x["participate_ranks"] == "[0, 1, 2, 3]"
                 and x["async_op"] == 0]
        assert [x["tensor_shape"] for x in grads[:4]] == ["(16, 8)", "(16,)", "(1, 16)", "(1,)"]
        assert grads[0]["tensor_dtype"] == "torch.float32" and grads[0]["bytes"] == 16 * 8 * 4
        assert all(x["duration_ms"] >= 0 for x in rows)  # none left in flight
        assert sorted({x["global_step"] for x in rows}) == [0, 1, 2, 3, 4, 5, 6]
        asyncs = [x for x in rows if x["async_op"] == 1 and x["peer"] < 0]  # issued after step 4's optimizer step
        assert len(asyncs) == 1 and asyncs[0]["global_step"] == 5 and asyncs[0]["tensor_shape"] == "(2,)"
        ts = [x["timestamp"] for x in rows]
        assert ts == sorted(ts) and abs(ts[-1] / 1e6 - time.time()) < 600
    # every rank issued the same world collectives in the same order
    sig = [[(x["op"], x["group_seq"], x["tensor_shape"]) for x in per_rank[r] if x["participate_ranks"] == "[0, 1, 2, 3]" and x["peer"] < 0]
           for r in range(WORLD)]
    assert all(s == sig[0] for s in sig)


def test_train_step_and_span_rows(train_job):
    job = train_job
    for r, pid in enumerate(job.pids):
        steps = job.rows(pid, "torch_step_timing")
        assert [x["global_step"] for x in steps] == list(range(6))
        assert steps[0]["step_duration_sec"] == -1.0 and all(x["step_duration_sec"] > 0 for x in steps[1:])
        assert {(x["rank"], x["world_size"]) for x in steps} == {(r, WORLD)}
        ev = job.rows(pid, "trace_event")
        kinds = [(x["record_type"], x["name"]) for x in ev]
        assert kinds.count(("span_start", "step")) == 6 and kinds.count(("span_end", "step")) == 6
        assert kinds[-1] == ("event", "done")
        assert all(x["phase"] == "train" for x in ev if x["name"] == "step")


def test_train_flight_recorder_snapshot(train_job):
    job = train_job
    for r, pid in enumerate(job.pids):
        reply = job.result("reply", r)
        assert reply["ok"] and reply["rank"] == r and reply["world_size"] == WORLD
        assert reply["format"] == "pickle" and reply["dump_function"] in ("_dump_fr_trace", "_dump_nccl_trace")
        assert reply["records"] > 20 and reply["process_groups"] >= 1 and reply["data_len"] > 0
        assert reply["version"] and reply["bytes"] > 0
        fr_rows = job.rows(pid, "torch_nccl_flight_record")
        assert len(fr_rows) == reply["records"]
        assert {x["snapshot_id"] for x in fr_rows} == {reply["snapshot_id"]}
        names = {x["profiling_name"] for x in fr_rows}
        assert {"gloo:all_reduce", "gloo:broadcast"} <= names, names
        world = [x for x in fr_rows if x["pg_desc"] == "default_pg"]
        assert [x["collective_seq_id"] for x in world] == sorted(x["collective_seq_id"] for x in world)
        assert all(x["rank"] == r and x["world_size"] == WORLD for x in fr_rows)
        assert all(x["top_frame"] and json.loads(x["frames"]) for x in fr_rows)
        assert any("worker.py" in x["frames"] for x in fr_rows)
        pg = job.rows(pid, "torch_nccl_pg_status")
        assert len(pg) == reply["process_groups"]
        default = [x for x in pg if x["pg_desc"] == "default_pg"]
        assert len(default) == 1 and default[0]["ranks"] == "[0, 1, 2, 3]"
        assert default[0]["last_enqueued_collective"] == max(x["collective_seq_id"] for x in world)
        if r in (0, 1):
            assert any(x["ranks"] == "[0, 1]" for x in pg)


def _go_query(data, sql):
    go = shutil.which("go")
    if go is None:
        pytest.skip("go not found: Go reader cross-check skipped")
    out = subprocess.run([go, "run", "./cmd/probing-mcp", "query", "--json", "--data-dir", data, sql],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PROBING_MCP_HISTORY="off"))
    if out.returncode != 0:
        pytest.skip("probing-mcp query did not run (%s)" % out.stderr.strip()[-300:])
    return json.loads(out.stdout)


def test_train_go_reader_agrees(train_job):
    job = train_job
    res = _go_query(job.data, "SELECT rank, count(*) AS n, max(group_seq) AS seq, sum(bytes) AS b "
                              "FROM python.comm_collective GROUP BY rank ORDER BY rank")
    got = [(int(x["rank"]), int(x["n"]), int(x["seq"]), int(x["b"])) for x in res["rows"]]
    want = []
    for r, pid in enumerate(job.pids):
        rows = job.rows(pid, "comm_collective")
        want.append((r, len(rows), max(x["group_seq"] for x in rows), sum(x["bytes"] for x in rows)))
    assert got == want
    res = _go_query(job.data, "SELECT count(*) AS n FROM python.torch_nccl_flight_record")
    assert int(res["rows"][0]["n"]) == sum(job.result("reply", r)["records"] for r in range(WORLD))


@pytest.fixture(scope="module")
def hang_job():
    py, _ = torch_python()
    job = run_job(py, "hang", {"HANG_TIMEOUT_S": str(HANG_TIMEOUT_S), "CULPRIT": "2"}, timeout=120)
    yield job
    job.cleanup()


def test_hang_is_visible_live_and_after(hang_job):
    job = hang_job
    # wait until every rank finished its 3 good steps
    deadline = time.time() + 90
    while time.time() < deadline and not all(job.result("ready", r) for r in range(WORLD)):
        if any(p.poll() not in (None, 0) for p in job.procs):
            pytest.fail("a rank died early:\n" + job.logs())
        time.sleep(0.2)
    assert all(job.result("ready", r) for r in range(WORLD)), job.logs()
    pids = [job.result("ready", r)["pid"] for r in range(WORLD)]
    # live: ranks 0, 1, 3 are inside the all_reduce that rank 2 skipped,
    # and rank 2's last call, one behind, has returned. Rows reach the
    # rings a flush (0.1 s here) after the call, each rank on its own
    # clock, so the picture is awaited while the peers still hang.
    live = None
    deadline = time.time() + HANG_TIMEOUT_S - 1
    while time.time() < deadline:
        last = {}
        for r, pid in enumerate(pids):
            rows = job.rows(pid, "comm_collective")
            last[r] = rows[-1] if rows else None
        if all(last[r] and last[r]["duration_ms"] == -1.0 for r in (0, 1, 3)) and last[2] and \
                last[2]["duration_ms"] >= 0 and last[2]["group_seq"] + 1 == last[0]["group_seq"]:
            live = last
            break
        time.sleep(0.1)
    assert live is not None, "rank 2 never showed one behind the hung peers: %s\n%s" % (last, job.logs())
    seq = {r: live[r]["group_seq"] for r in range(WORLD)}
    assert seq[0] == seq[1] == seq[3] == seq[2] + 1, seq
    assert live[0]["op"] == "all_reduce" and live[0]["global_step"] == 3 and live[0]["tensor_shape"] == "(1,)"
    assert live[2]["duration_ms"] >= 0  # rank 2's last call returned; it is stuck elsewhere

    rc = job.wait()
    assert rc[2] == 0 and all(rc[r] != 0 for r in (0, 1, 3)), (rc, job.logs())
    assert job.result("unexpected", 0) is None
    # the hung calls got their duration (the timeout) once gloo gave up
    for r in (0, 1, 3):
        rows = job.rows(pids[r], "comm_collective")
        assert rows[-1]["group_seq"] == seq[r] and rows[-1]["duration_ms"] >= (HANG_TIMEOUT_S - 1) * 1000
    # Flight Recorder: ranks 0, 1, 3 through the watchdog hook, rank 2 through its own request
    status = {}
    for r, pid in enumerate(pids):
        pg = job.rows(pid, "torch_nccl_pg_status")
        assert pg, "rank %d persisted no pg_status\n%s" % (r, job.logs())
        default = [x for x in pg if x["pg_desc"] == "default_pg"][-1]
        status[r] = default["last_enqueued_collective"]
        fr_rows = job.rows(pid, "torch_nccl_flight_record")
        assert fr_rows and {x["snapshot_id"] for x in fr_rows} == {default["snapshot_id"]}
        assert max(x["collective_seq_id"] for x in fr_rows if x["pg_desc"] == "default_pg") == status[r]
    assert status[0] == status[1] == status[3] == status[2] + 1, status
    assert job.result("reply", 2)["ok"]
    log0 = job.logs()
    assert "Flight Recorder snapshot" in log0 and "persisted after RuntimeError" in log0
