#!/usr/bin/env python3
"""Generate the fr_trace parity corpus.

Every scenario below is a set of per-rank Flight Recorder dumps, written as
`<scenario>/nccl_trace_rank_<r>` exactly as torch writes them (a pickled dict;
one scenario, f17, as `_dump_nccl_trace_json` JSON).  The script then runs the
installed torch's fr_trace analysis (`build_db`) on them in ascending rank order
and stores what fr_trace logged:

  <scenario>/fr_trace.txt                     transcript, default CLI args
  <scenario>/fr_trace_allow_incomplete.txt    only when the default run aborted
  <scenario>/expected.json                    the transcript parsed into blocks
  <scenario>/expected_allow_incomplete.json   idem for the second run

Regenerate from the repository root with:

  /root/devenv/bin/python flightrecorder/testdata/parity/gen_corpus.py

Options: --no-cli skips the per-scenario pass through the real CLI;
--only NAME[,NAME...] regenerates a subset (README's table is then left alone).

Only the standard library and torch are needed.  torch's own fr_trace source is
run, never copied.
"""

import argparse
import copy
import json
import os
import pickle
import shutil
import subprocess
import sys

from corpus_frtrace import DETAIL_KINDS, load_details, parse_transcript, run_build_db, summarize_db
from corpus_job import HERE, PREFIX, Job, to_json_dump


SCENARIOS = []


def scenario(name, description, fmt="pickle"):
    def deco(fn):
        SCENARIOS.append({"name": name, "description": description, "fn": fn, "format": fmt})
        return fn
    return deco


# ---- reference §6.2: build_db end-to-end (torch's own test_fr_analysis cases)


def bd_job():
    """Template of §6.2: rank 0 has PG "1" = [0], rank 1 has PG "1" = [1]."""
    j = Job(2, version="2.8", frames=False, default_pg=None)
    j.pg("0", "default_pg", [0, 1])
    j.pg("1", "sub_pg", [0], on=[0])
    j.pg("1", "sub_pg", [1], on=[1])
    return j


def bd_entry(j, rank, rid, op, sizes, pg=("0", "default")):
    """torch test helper entry: dtypes are the bare string "float32", seq 0."""
    return j.add(rank, f"nccl:{op}", pg=pg[0], desc=pg[1], inp=sizes, out=copy.deepcopy(sizes),
                 dtype="float32", in_dtypes="float32", out_dtypes="float32", state="completed",
                 seq=0, p2p_seq=0, is_p2p=False, record_id=rid, frames=[])


@scenario("bd1_two_pgs_same_name", "§6.2 case 1: PG '1' has different members on each rank -> two PGs; all pass")
def _():
    j = bd_job()
    for r in (0, 1):
        bd_entry(j, r, 0, "all_reduce", [[4, 4]])
        bd_entry(j, r, 1, "all_reduce", [[5, 5]], pg=("1", "sub_pg"))
    return j.dumps()


@scenario("bd2_allreduce_coalesced", "§6.2 case 2: single allreduce_coalesced entry on both ranks; pass")
def _():
    j = bd_job()
    for r in (0, 1):
        bd_entry(j, r, 0, "allreduce_coalesced", [[4, 4]])
    return j.dumps()


@scenario("bd3_coalesced_broadcasts", "§6.2 case 3: broadcast x2 + nccl:coalesced terminator, all seq 0; pass, 'does not have a coalesced end' logs")
def _():
    j = bd_job()
    for r in (0, 1):
        bd_entry(j, r, 0, "broadcast", [[4, 4]])
        bd_entry(j, r, 1, "broadcast", [[4, 4]])
        bd_entry(j, r, 2, "coalesced", [[]])
    return j.dumps()


@scenario("bd4_coalesced_size_mismatch", "§6.2 case 4: _broadcast_oop x2 + ALLGATHER_coalesced; rank 0's second op [[5, 5]] vs [[4, 4]]")
def _():
    j = bd_job()
    bd_entry(j, 0, 0, "_broadcast_oop", [[4, 4]])
    bd_entry(j, 0, 1, "_broadcast_oop", [[5, 5]])
    bd_entry(j, 0, 2, "ALLGATHER_coalesced", [[]])
    bd_entry(j, 1, 0, "_broadcast_oop", [[4, 4]])
    bd_entry(j, 1, 1, "_broadcast_oop", [[4, 4]])
    bd_entry(j, 1, 2, "ALLGATHER_coalesced", [[]])
    return j.dumps()


@scenario("bd5_reduce_scatter_coalesced", "§6.2 case 5: _reduce_oop x2 + REDUCE_SCATTER_coalesced on both ranks; pass")
def _():
    j = bd_job()
    for r in (0, 1):
        bd_entry(j, r, 0, "_reduce_oop", [[4, 4]])
        bd_entry(j, r, 1, "_reduce_oop", [[4, 4]])
        bd_entry(j, r, 2, "REDUCE_SCATTER_coalesced", [[]])
    return j.dumps()


@scenario("bd6_coalesced_missing_on_rank0", "§6.2 case 6: rank 1 has an extra coalesced group (all seq 0) that rank 0 lacks")
def _():
    j = bd_job()
    bd_entry(j, 0, 0, "all_reduce", [[4, 4]])
    bd_entry(j, 1, 0, "all_reduce", [[4, 4]])
    bd_entry(j, 1, 1, "_reduce_oop", [[4, 4]])
    bd_entry(j, 1, 2, "_reduce_oop", [[4, 4]])
    bd_entry(j, 1, 3, "REDUCE_SCATTER_coalesced", [[]])
    return j.dumps()


# ---- reference §6.3: F1..F19


def f1_job():
    j = Job(4, timing=True)
    for _ in range(3):
        j.coll(range(4), "all_reduce")
    j.coll([0, 1, 3], "all_reduce", state="started")
    return j


@scenario("f01_missing_rank", "F1: 4 ranks, ranks 0,1,3 are in seq 4 (started), rank 2 stopped after seq 3")
def _():
    return f1_job().dumps()


@scenario("f02_missing_dump", "F2: as F1 but rank 2's dump file is absent")
def _():
    d = f1_job().dumps()
    d[2] = None
    return d


@scenario("f03_type_mismatch", "F3: 2 ranks, seq 5: rank 0 all_reduce, rank 1 _all_gather_base [[1024]]/[[2048]]")
def _():
    j = Job(2)
    for _ in range(4):
        j.coll([0, 1], "all_reduce")
    j.coll(0, "all_reduce")
    j.coll(1, "_all_gather_base", inp=[[1024]], out=[[2048]])
    return j.dumps()


@scenario("f04_wrong_culprit", "F4: 4 ranks, seq 3: rank 0 in/out [[4, 5]], ranks 1-3 [[3, 4]] (fr_trace blames the majority)")
def _():
    j = Job(4)
    for _ in range(2):
        j.coll(range(4), "all_reduce")
    j.coll(0, "all_reduce", inp=[[4, 5]])
    j.coll([1, 2, 3], "all_reduce", inp=[[3, 4]])
    return j.dumps()


@scenario("f05_dtype_mismatch", "F5: 2 ranks, one all_reduce; rank 1 has BFloat16 in/out dtypes")
def _():
    j = Job(2)
    j.coll(0, "all_reduce")
    j.coll(1, "all_reduce", dtype="BFloat16")
    return j.dumps()


@scenario("f06_in_flight_state", "F6: 2 ranks, seq 1-9 completed; seq 10 completed on rank 0, started on rank 1")
def _():
    j = Job(2, timing=True)
    for _ in range(9):
        j.coll([0, 1], "all_reduce")
    j.coll(0, "all_reduce")
    j.coll(1, "all_reduce", state="started")
    return j.dumps()


@scenario("f07_allgather_numel", "F7: all_gather over 2 ranks, rank 1 output [[1024]] instead of [[2048]]")
def _():
    j = Job(2)
    j.coll(0, "all_gather", inp=[[1024]], out=[[2048]])
    j.coll(1, "all_gather", inp=[[1024]], out=[[1024]])
    return j.dumps()


@scenario("f08_alltoall_totals", "F8: all_to_all over 2 ranks, rank 0 [[8]]/[[8]], rank 1 [[8]]/[[6]] (totals 16 vs 14)")
def _():
    j = Job(2)
    j.coll(0, "all_to_all", inp=[[8]], out=[[8]])
    j.coll(1, "all_to_all", inp=[[8]], out=[[6]])
    return j.dumps()


@scenario("f09_p2p_two_ranks", "F9: plain send 0->1 / recv 1<-0 [[4]] in a 2-rank PG")
def _():
    j = Job(2)
    j.send(0, 1)
    j.recv(1, 0)
    return j.dumps()


@scenario("f10_p2p_in_4rank_pg", "F10: as F9 inside a 4-rank PG; ranks 2 and 3 have no entries (empty rings)")
def _():
    j = Job(4)
    j.send(0, 1)
    j.recv(1, 0)
    return j.dumps()


@scenario("f11_p2p_coalesced_bidir", "F11: 2 all_reduces, coalesced batch rank 0 [send 0->1, recv 0<-1], rank 1 [recv 1<-0, send 1->0], then 2 all_reduces")
def _():
    j = Job(2)
    # Two leading all_reduces keep every collective seq != the batch's p2p seq 1
    # (see p2p_*_seq_collision for what happens otherwise).
    for _ in range(2):
        j.coll([0, 1], "all_reduce")
    j.send(0, 1)
    j.recv(0, 1, p2p_seq=1)
    j.p2p_terminator(0)
    j.recv(1, 0)
    j.send(1, 0, p2p_seq=1)
    j.p2p_terminator(1)
    for _ in range(2):
        j.coll([0, 1], "all_reduce")
    return j.dumps()


@scenario("f12_p2p_coalesced_oneway", "F12: 2 all_reduces, coalesced batch rank 0 [send 0->1], rank 1 [recv 1<-0], then an all_reduce")
def _():
    j = Job(2)
    for _ in range(2):
        j.coll([0, 1], "all_reduce")
    j.send(0, 1)
    j.p2p_terminator(0)
    j.recv(1, 0)
    j.p2p_terminator(1)
    j.coll([0, 1], "all_reduce")
    return j.dumps()


@scenario("f13_ring_wrap", "F13: 2000-entry rings; rank 0 rids 100-2099 (seq 101-2100), rank 1 rids 102-2101 (seq 103-2102, last 2 scheduled)")
def _():
    j = Job(2, frames=False)
    for r, first, n_done in ((0, 100, 2000), (1, 102, 1998)):
        for i in range(2000):
            rid = first + i
            state = "completed" if i < n_done else "scheduled"
            j.coll(r, "all_reduce", seq=rid + 1, record_id=rid, op_id=rid + 1, state=state, frames=[])
    return j.dumps()


@scenario("f14_wrap_unequal_rids", "F14: both rings hold PG-0 seq 1001-3000; rank 1's rids are 50 higher (50 old ops on its own PG '1')")
def _():
    j = Job(2, frames=False)
    j.pg("1", "aux", [1])
    for r, first in ((0, 1000), (1, 1050)):
        for i in range(2000):
            j.coll(r, "all_reduce", seq=1001 + i, record_id=first + i, op_id=1001 + i, frames=[])
    j.coll_seq[1]["1"] = 50
    j.pg_status_override[1]["1"] = {"last_enqueued_collective": 50, "last_started_collective": -1,
                                    "last_completed_collective": 50}
    return j.dumps()


@scenario("f15_mismatch_cap", "F15: 2 ranks; rank 0 seq 1-20 (5-20 scheduled), rank 1 seq 1-4")
def _():
    j = Job(2)
    for s in range(20):
        j.coll(0, "all_reduce", state="completed" if s < 4 else "scheduled")
    for s in range(4):
        j.coll(1, "all_reduce")
    return j.dumps()


@scenario("f16_mixed_versions", "F16: rank 0 dump version 2.10, rank 1 version 2.8")
def _():
    a = Job(2, version="2.10")
    b = Job(2, version="2.8")
    for j in (a, b):
        for _ in range(2):
            j.coll([0, 1], "all_reduce")
    return {0: a.dump(0), 1: b.dump(1)}


@scenario("f17_json_dumps", "F17: the F1 dumps written as _dump_nccl_trace_json JSON (no frames, 0 times, string pg_status)", fmt="json")
def _():
    return f1_job().dumps()


@scenario("f18_unknown_op", "F18: seq 2 is nccl:allreduce_sparse on both ranks")
def _():
    j = Job(2)
    j.coll([0, 1], "all_reduce")
    j.coll([0, 1], "allreduce_sparse")
    j.coll([0, 1], "all_reduce")
    return j.dumps()


@scenario("f19_timeout_all_scheduled", "F19: 4 ranks, seq 1-6 completed, seq 7 retired+scheduled on every rank (timing off)")
def _():
    j = Job(4)
    for _ in range(6):
        j.coll(range(4), "all_reduce")
    j.coll(range(4), "all_reduce", state="scheduled", retired=True)
    return j.dumps()


# ---- extra scenarios


@scenario("tp_dp_subgroups", "8 ranks, default PG + TP pairs '1'-'4' + DP '5'=[0,2,4,6] '6'=[1,3,5,7]; rank 5 skips the last dp all_reduce")
def _():
    j = Job(8, timing=True)
    tp = {0: "1", 1: "1", 2: "2", 3: "2", 4: "3", 5: "3", 6: "4", 7: "4"}
    for k, ranks in enumerate(([0, 1], [2, 3], [4, 5], [6, 7])):
        j.pg(str(k + 1), "tp", ranks)
    j.pg("5", "dp", [0, 2, 4, 6])
    j.pg("6", "dp", [1, 3, 5, 7])
    dp = {r: ("5" if r % 2 == 0 else "6") for r in range(8)}
    steps = 3
    for step in range(steps):
        last = step == steps - 1
        for r in range(8):
            j.coll(r, "all_reduce", pg=tp[r], inp=[[4096, 1024]], dtype="BFloat16")
            j.coll(r, "all_reduce", pg=tp[r], inp=[[4096, 1024]], dtype="BFloat16")
            if not last:
                j.coll(r, "all_reduce", pg=dp[r], inp=[[1024]])
                j.coll(r, "all_reduce", pg="0", inp=[[1]])
            else:
                if r != 5:
                    # dp group '6' hangs: ranks 1, 3, 7 wait for rank 5
                    j.coll(r, "all_reduce", pg=dp[r], inp=[[1024]],
                           state="started" if dp[r] == "6" else "completed")
                if dp[r] == "5" or r == 5:
                    # ranks that got past the dp step enter the final default-PG all_reduce
                    j.coll(r, "all_reduce", pg="0", inp=[[1]], state="started")
    return j.dumps()


@scenario("allgather_numel", "4 ranks: all_reduce, then all_gather [[1024]]->[[4096]] where rank 2 has output [[3072]]")
def _():
    j = Job(4)
    j.coll(range(4), "all_reduce")
    for r in range(4):
        j.coll(r, "all_gather", inp=[[1024]], out=[[3072]] if r == 2 else [[4096]])
    return j.dumps()


@scenario("all_gather_base_numel", "2 ranks: _all_gather_base [[1024]]->[[1024]] on both (consistent but numel != 1024*2)")
def _():
    j = Job(2)
    j.coll([0, 1], "_all_gather_base", inp=[[1024]], out=[[1024]])
    return j.dumps()


@scenario("all_gather_list_form_ok", "2 ranks: all_gather [[1024]] -> list form [[1024], [1024]] (FlightRecorderHook style); accepted")
def _():
    j = Job(2)
    j.coll([0, 1], "all_gather", inp=[[1024]], out=[[1024], [1024]])
    return j.dumps()


@scenario("reduce_scatter_ok", "4 ranks: reduce_scatter (list input), _reduce_scatter_base, reduce_scatter_tensor_coalesced, all consistent")
def _():
    j = Job(4)
    j.coll(range(4), "reduce_scatter", inp=[[1024]] * 4, out=[[1024]])
    j.coll(range(4), "_reduce_scatter_base", inp=[[8192]], out=[[2048]])
    j.coll(range(4), "reduce_scatter_tensor_coalesced", inp=[[4096], [4096]], out=[[1024], [1024]])
    return j.dumps()


@scenario("alltoall_single", "3 ranks: all_to_all_single with uneven splits whose totals balance (15 in, 15 out)")
def _():
    j = Job(3)
    for r, (i, o) in enumerate(((6, 5), (4, 4), (5, 6))):
        j.coll(r, "all_to_all_single", inp=[[i, 16]], out=[[o, 16]])
    j.coll(range(3), "all_reduce")
    return j.dumps()


@scenario("coalesced_nonp2p_27", "version 2.10, 2 ranks: allreduce_coalesced, ALLGATHER/REDUCE_SCATTER/plain coalesced groups, allgather_coalesced, then a bad ALLGATHER group")
def _():
    j = Job(2, version="2.10")
    R = [0, 1]
    j.coll(R, "allreduce_coalesced", inp=[[1024], [512]])
    j.group(R, [("_all_gather_base", dict(inp=[[1024]], out=[[2048]])),
                ("_all_gather_base", dict(inp=[[512]], out=[[1024]]))], "ALLGATHER_coalesced")
    j.group(R, [("_reduce_scatter_base", dict(inp=[[2048]], out=[[1024]])),
                ("_reduce_scatter_base", dict(inp=[[1024]], out=[[512]]))], "REDUCE_SCATTER_coalesced")
    j.group(R, [("all_reduce", dict(inp=[[256]])), ("all_reduce", dict(inp=[[128]]))], "coalesced")
    j.coll(R, "allgather_coalesced", inp=[[64], [32]], out=[[128], [64]])
    j.group(0, [("_all_gather_base", dict(inp=[[1024]], out=[[2048]])),
                ("_all_gather_base", dict(inp=[[512]], out=[[1024]]))], "ALLGATHER_coalesced")
    j.group(1, [("_all_gather_base", dict(inp=[[1024]], out=[[2048]])),
                ("_all_gather_base", dict(inp=[[256]], out=[[512]]))], "ALLGATHER_coalesced")
    j.coll(R, "all_reduce")
    return j.dumps()


@scenario("p2p_ring_batch", "4 ranks: 2 all_reduces, one coalesced batch per rank (send r->r+1, recv r<-r-1, nccl:coalesced), then an all_reduce")
def _():
    j = Job(4)
    for _ in range(2):
        j.coll(range(4), "all_reduce")
    for r in range(4):
        j.send(r, (r + 1) % 4)
        j.recv(r, (r - 1) % 4, p2p_seq=j.p2p_seq[r]["0"])
        j.p2p_terminator(r)
    j.coll(range(4), "all_reduce")
    return j.dumps()


@scenario("p2p_seq_plain_2ranks", "2 ranks: 6 plain send/recv pairs in both directions (p2p seq 1-6), then an all_reduce")
def _():
    j = Job(2)
    plan = [(0, 1, [[4]]), (0, 1, [[8]]), (1, 0, [[16]]), (1, 0, [[32]]), (0, 1, [[64]]), (1, 0, [[128]])]
    for src, dst, size in plan:
        j.send(src, dst, size=size)
        j.recv(dst, src, size=size)
    j.coll([0, 1], "all_reduce")
    return j.dumps()


@scenario("version_2_3_alltoall", "version 2.3: the F8 all_to_all (totals 16 vs 14) is not checked before 2.4")
def _():
    j = Job(2, version="2.3")
    j.coll(0, "all_to_all", inp=[[8]], out=[[8]])
    j.coll(1, "all_to_all", inp=[[8]], out=[[6]])
    j.coll([0, 1], "all_reduce")
    return j.dumps()


@scenario("state_timeout_retired", "4 ranks, seq 7: rank 3 completed, ranks 0-2 retired while still scheduled")
def _():
    j = Job(4)
    for _ in range(6):
        j.coll(range(4), "all_reduce")
    j.coll([0, 1, 2], "all_reduce", state="scheduled", retired=True)
    j.coll(3, "all_reduce")
    return j.dumps()


@scenario("desc_mismatch", "2 ranks: PG '1' = [0, 1] has desc 'tp' on rank 0 and 'dp' on rank 1")
def _():
    j = Job(2)
    j.pg("1", "tp", [0, 1], on=[0])
    j.pg("1", "dp", [0, 1], on=[1])
    j.coll([0, 1], "all_reduce")
    j.coll([0, 1], "all_reduce", pg="1")
    return j.dumps()


@scenario("pg_missing_in_config", "2 ranks: PG '1' = [0, 1] is in rank 0's pg_config only; both ranks have an entry on it")
def _():
    j = Job(2)
    j.pg("1", "sub", [0, 1], on=[0])
    j.coll([0, 1], "all_reduce")
    j.coll(0, "all_reduce", pg="1")
    j.coll_seq[1]["1"] = 0
    j.coll(1, "all_reduce", pg="1", desc="sub")
    return j.dumps()


@scenario("unknown_backend_warning", "2 ranks: profiling names 'mybackend:all_reduce' (backend not in fr_trace's list)")
def _():
    j = Job(2)
    j.coll([0, 1], "all_reduce", backend="mybackend")
    j.coll([0, 1], "all_reduce")
    return j.dumps()


@scenario("p2p_recv_any_source", "2 ranks, gloo: send 0->1 matched by recv_any_source 'gloo:recv 1<-?'")
def _():
    j = Job(2)
    j.send(0, 1, backend="gloo")
    j.recv(1, 0, backend="gloo", any_source=True)
    return j.dumps()


@scenario("p2p_batch_seq_collision", "2 ranks: coalesced batch [send 0->1]/[recv 1<-0] (coll seq 0, p2p seq 1), then the first all_reduce (coll seq 1)")
def _():
    j = Job(2)
    j.send(0, 1)
    j.p2p_terminator(0)
    j.recv(1, 0)
    j.p2p_terminator(1)
    j.coll([0, 1], "all_reduce")
    j.coll([0, 1], "all_reduce")
    return j.dumps()


@scenario("p2p_plain_seq_collision", "2 ranks: plain send 0->1 / recv 1<-0 (coll seq 0, p2p seq 1), then the first all_reduce (coll seq 1)")
def _():
    j = Job(2)
    j.send(0, 1)
    j.recv(1, 0)
    j.coll([0, 1], "all_reduce")
    return j.dumps()


# --------------------------------------------------------------------------
# Running fr_trace
# --------------------------------------------------------------------------


def compact_json(v, indent=0, width=100):
    """JSON with short containers kept on one line."""
    flat = json.dumps(v)
    if len(flat) + indent <= width or not isinstance(v, (dict, list)) or not v:
        return flat
    pad = " " * (indent + 1)
    if isinstance(v, dict):
        items = [f"{pad}{json.dumps(k)}: {compact_json(x, indent + 1, width)}" for k, x in v.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + compact_json(x, indent + 1, width) for x in v]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def write_json(path, doc):
    with open(path, "w") as f:
        f.write(compact_json(doc) + "\n")


def write_dumps(sdir, dumps, fmt, protocol):
    for r, d in sorted(dumps.items()):
        if d is None:
            continue
        path = os.path.join(sdir, f"{PREFIX}{r}")
        if fmt == "pickle":
            with open(path, "wb") as f:
                pickle.dump(d, f, protocol=protocol)
        else:
            with open(path, "w") as f:
                f.write(to_json_dump(d))


def cli_check(sdir):
    p = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", sdir],
        capture_output=True, text=True, timeout=600,
    )
    err = p.stderr
    loader_failed = ("components/loader.py" in err) or ("UnpicklingError" in err)
    last = [ln for ln in err.splitlines() if ln.strip()]
    return {"exit_code": p.returncode, "loader_ok": not loader_failed,
            "last_line": last[-1] if (p.returncode != 0 and last) else None}


def expected_doc(sc, ranks, args, text, abort, db, protocol, cli):
    n, colls = summarize_db(db)
    return {
        "scenario": sc["name"],
        "description": sc["description"],
        "ranks": ranks,
        "args": args,
        "aborted": abort,
        "blocks": parse_transcript(text),
        "format": sc["format"],
        "pickle_protocol": protocol if sc["format"] == "pickle" else None,
        "collectives_count": n,
        "collectives": colls,
        "cli": cli,
    }


def summary_line(doc):
    """First problem header per PG (or the abort) for README."""
    if not doc["blocks"]:
        n = doc["collectives_count"]
        return f"no problems logged ({n} collective{'' if n == 1 else 's'}, all pass)"
    parts = []
    seen = set()
    for b in doc["blocks"]:
        k = b["kind"]
        if k in DETAIL_KINDS:
            key = ("pg", b["pg_name"])
            if key in seen:
                continue
            seen.add(key)
            extra = ""
            if b["missing_ranks"]:
                extra = f" (missing {set(b['missing_ranks'])})"
            elif b["culprit_ranks"]:
                extra = f" (culprits {b['culprit_ranks']}: {', '.join(sorted(set(b['error_types'])))})"
            elif b["total_input_numel"] is not None:
                extra = f" (totals {b['total_input_numel']}/{b['total_output_numel']})"
            parts.append(f"pg {b['pg_name']}: `{b['header']}`{extra}")
        else:
            if (k, b["header"]) in seen:
                continue
            seen.add((k, b["header"]))
            h = b["header"]
            if k == "NO_ERRORS_FOUND":
                h = "No errors found ..."
            elif k == "UNDECIDED_MISSING_DUMP":
                h = f"We cannot decide ... ranks ({set(b['missing_ranks'])}) ..."
            parts.append(f"`{h}`")
    return "; ".join(parts)


def stable(new, old):
    """Keep the previous transcript when the new one differs only in the order
    of the culprits in an `error msg` line (set order, see README), so that
    regenerating does not churn the golden files."""
    if old is None or old == new:
        return new
    try:
        same = parse_transcript(old) == parse_transcript(new)
    except ValueError:
        return new
    return old if same else new


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-cli", action="store_true", help="skip the real-CLI loader check")
    ap.add_argument("--only", default=None, help="comma-separated scenario names")
    opts = ap.parse_args()
    only = set(opts.only.split(",")) if opts.only else None

    import torch
    summaries = []
    for idx, sc in enumerate(SCENARIOS):
        name = sc["name"]
        if only and name not in only:
            continue
        sdir = os.path.join(HERE, name)
        old = {}
        for fn in ("fr_trace.txt", "fr_trace_allow_incomplete.txt"):
            if os.path.exists(os.path.join(sdir, fn)):
                with open(os.path.join(sdir, fn)) as f:
                    old[fn] = f.read()
        if os.path.isdir(sdir):
            shutil.rmtree(sdir)
        os.makedirs(sdir)
        dumps = sc["fn"]()
        protocol = 2 if idx % 2 == 0 else pickle.DEFAULT_PROTOCOL
        write_dumps(sdir, dumps, sc["format"], protocol)
        ranks = sorted(r for r, d in dumps.items() if d is not None)
        cli = cli_check(sdir) if not opts.no_cli else None

        details = load_details(sdir, ranks, sc["format"])
        text, abort, db = run_build_db(details, [])
        text = stable(text, old.get("fr_trace.txt"))
        with open(os.path.join(sdir, "fr_trace.txt"), "w") as f:
            f.write(text)
        doc = expected_doc(sc, ranks, [], text, abort, db, protocol, cli)
        write_json(os.path.join(sdir, "expected.json"), doc)
        line = summary_line(doc)
        if abort is not None:
            args = ["--allow-incomplete-ranks"]
            details = load_details(sdir, ranks, sc["format"])
            text2, abort2, db2 = run_build_db(details, args)
            text2 = stable(text2, old.get("fr_trace_allow_incomplete.txt"))
            with open(os.path.join(sdir, "fr_trace_allow_incomplete.txt"), "w") as f:
                f.write(text2)
            doc2 = expected_doc(sc, ranks, args, text2, abort2, db2, protocol, None)
            write_json(os.path.join(sdir, "expected_allow_incomplete.json"), doc2)
            line += f"; with `--allow-incomplete-ranks`: {summary_line(doc2)}"
        fmt = f"pickle p{protocol}" if sc["format"] == "pickle" else "json"
        summaries.append((name, sc["description"], line, fmt))
        print(f"{name}: {line}" + (f"  [cli exit {cli['exit_code']}, loader_ok={cli['loader_ok']}]" if cli else ""))

    if only is None:
        update_readme(summaries, torch.__version__)


BEGIN = "<!-- BEGIN SCENARIOS (generated by gen_corpus.py) -->"
END = "<!-- END SCENARIOS -->"


def update_readme(summaries, torch_version):
    path = os.path.join(HERE, "README.md")
    if not os.path.exists(path):
        return
    with open(path) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        return
    rows = [f"Generated with torch {torch_version}.", "",
            "| Scenario | Files | Setup | fr_trace said (first header per PG, or the abort) |",
            "|---|---|---|---|"]
    for name, desc, line, fmt in summaries:
        rows.append(f"| `{name}` | {fmt} | {desc.replace('|', '/')} | {line.replace('|', '/')} |")
    head, rest = text.split(BEGIN, 1)
    _old, tail = rest.split(END, 1)
    with open(path, "w") as f:
        f.write(head + BEGIN + "\n" + "\n".join(rows) + "\n" + END + tail)


if __name__ == "__main__":
    main()
