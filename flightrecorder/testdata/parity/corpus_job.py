"""The dump builder of gen_corpus.py: a synthetic job's Flight Recorder
entries, as torch writes them (pickle or JSON)."""
import copy
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "nccl_trace_rank_"

# 2026-01-01T00:00:00Z in ns: every timestamp is above 2**53 on purpose.
T0 = 1767225600_000_000_000
TIMEOUT_MS = 600000

# c10d source lines used for the innermost frame of the synthetic stacks.
C10D_LINES = {
    "all_reduce": 2950,
    "all_gather": 4170,
    "_all_gather_base": 4260,
    "all_gather_into_tensor": 4260,
    "reduce_scatter": 4710,
    "_reduce_scatter_base": 4800,
    "reduce_scatter_tensor_coalesced": 4850,
    "all_to_all": 4990,
    "all_to_all_single": 4930,
    "broadcast": 2810,
    "send": 2540,
    "recv": 2590,
    "barrier": 5120,
    "allreduce_coalesced": 3010,
    "allgather_coalesced": 4330,
    "coalesced": 2470,
    "ALLGATHER_coalesced": 4330,
    "REDUCE_SCATTER_coalesced": 4870,
}


# --------------------------------------------------------------------------
# Dump builder
# --------------------------------------------------------------------------


def op_of(profiling_name):
    """'nccl:send 0->1' -> 'send'."""
    return profiling_name.rpartition(":")[2].split(" ")[0]


class Job:
    """Builds one FR dump per rank.

    Entries are appended per rank in program order; record ids, op ids and the
    per-PG sequence counters are assigned the way ProcessGroupNCCL does.
    """

    def __init__(self, world, version="2.8", timing=False, frames=True,
                 default_pg=("0", "default_pg")):
        self.world = world
        self.version = version
        self.timing = timing  # TORCH_NCCL_ENABLE_TIMING: started states + duration_ms
        self.frames = frames
        self.pgs = {r: {} for r in range(world)}  # rank -> name -> info
        self.entries = {r: [] for r in range(world)}
        self.next_rid = {r: 0 for r in range(world)}
        self.coll_seq = {r: {} for r in range(world)}
        self.p2p_seq = {r: {} for r in range(world)}
        self.op_id = {r: {} for r in range(world)}
        self.pg_status_override = {r: {} for r in range(world)}
        self._frame_cache = {}
        self._line = {r: 0 for r in range(world)}
        if default_pg:
            self.pg(default_pg[0], default_pg[1], list(range(world)))

    # -- process groups --------------------------------------------------
    def pg(self, name, desc, ranks, on=None, ranks_str=None):
        """Register PG `name` in the pg_config of `on` (default: its members)."""
        for r in (ranks if on is None else on):
            self.pgs[r][name] = {
                "name": name,
                "desc": desc,
                "ranks": ranks_str if ranks_str is not None else str(list(ranks)),
                "members": sorted(ranks),
                "pg_id": len(self.pgs[r]),
            }
            self.coll_seq[r].setdefault(name, 0)
            self.p2p_seq[r].setdefault(name, 0)
            self.op_id[r].setdefault(name, 0)

    def members(self, rank, pg):
        return self.pgs[rank][pg]["members"]

    # -- frames ----------------------------------------------------------
    def _frames(self, rank, op):
        if not self.frames:
            return []
        # The innermost frame dict is one shared object per op type, as in the
        # C++ writer (and pickled once, then re-used via the memo).
        if op not in self._frame_cache:
            self._frame_cache[op] = {
                "name": op,
                "filename": "torch/distributed/distributed_c10d.py",
                "line": C10D_LINES.get(op, 3333),
            }
        self._line[rank] += 1
        return [self._frame_cache[op],
                {"name": "train_step", "filename": "train.py", "line": 100 + self._line[rank]}]

    # -- entries ---------------------------------------------------------
    def add(self, rank, profiling_name, pg="0", inp=None, out=None, dtype="Float",
            odtype=None, state="completed", seq=None, p2p_seq=None, is_p2p=False,
            retired=None, frames=None, record_id=None, desc=None, in_dtypes=None,
            out_dtypes=None, op_id=None):
        """Append one raw entry.  seq/p2p_seq None = current counter value."""
        if inp is None:
            inp = [[1024]]
        if out is None:
            out = copy.deepcopy(inp)
        if in_dtypes is None:
            in_dtypes = [dtype] * len(inp)
        if out_dtypes is None:
            od = dtype if odtype is None else odtype
            out_dtypes = [od] * len(out)
        if record_id is None:
            record_id = self.next_rid[rank]
        self.next_rid[rank] = record_id + 1
        info = self.pgs[rank].get(pg)
        self.op_id[rank][pg] = self.op_id[rank].get(pg, 0) + 1 if op_id is None else op_id
        e = {
            "frames": self._frames(rank, op_of(profiling_name)) if frames is None else frames,
            "record_id": record_id,
            "pg_id": info["pg_id"] if info else len(self.pgs[rank]),
            "process_group": (pg, desc if desc is not None else (info["desc"] if info else "undefined")),
            "collective_seq_id": self.coll_seq[rank].get(pg, 0) if seq is None else seq,
            "p2p_seq_id": self.p2p_seq[rank].get(pg, 0) if p2p_seq is None else p2p_seq,
            "op_id": self.op_id[rank][pg],
            "profiling_name": profiling_name,
            "input_sizes": inp,
            "input_dtypes": in_dtypes,
            "output_sizes": out,
            "output_dtypes": out_dtypes,
            "state": state,
            "retired": (state == "completed") if retired is None else retired,
            "is_p2p": is_p2p,
        }
        self.entries[rank].append(e)
        return e

    def coll(self, ranks, op, pg="0", backend="nccl", **kw):
        """A collective on each of `ranks`: advances that PG's collective seq."""
        ranks = [ranks] if isinstance(ranks, int) else list(ranks)
        out = []
        for r in ranks:
            if "seq" not in kw or kw["seq"] is None:
                self.coll_seq[r][pg] += 1
                seq = self.coll_seq[r][pg]
            else:
                seq = kw["seq"]
                self.coll_seq[r][pg] = max(self.coll_seq[r][pg], seq)
            k = dict(kw)
            k["seq"] = seq
            out.append(self.add(r, f"{backend}:{op}", pg=pg, **k))
        return out

    def group(self, ranks, ops, terminator, pg="0", backend="nccl", term_sizes=None, **kw):
        """Non-P2P coalesced group: ops (list of (op, kwargs)) + terminator, one seq."""
        ranks = [ranks] if isinstance(ranks, int) else list(ranks)
        for r in ranks:
            self.coll_seq[r][pg] += 1
            seq = self.coll_seq[r][pg]
            for op, okw in ops:
                k = dict(kw)
                k.update(okw)
                self.add(r, f"{backend}:{op}", pg=pg, seq=seq, **k)
            ts = [] if term_sizes is None else term_sizes
            self.add(r, f"{backend}:{terminator}", pg=pg, seq=seq, inp=ts, out=copy.deepcopy(ts),
                     in_dtypes=[], out_dtypes=[], **kw)

    def _local(self, rank, pg, g):
        return self.members(rank, pg).index(g)

    def send(self, src, dst, pg="0", size=None, backend="nccl", p2p_seq=None, **kw):
        """send on global rank src to global rank dst (names use group-local ranks)."""
        size = [[4]] if size is None else size
        if p2p_seq is None:
            self.p2p_seq[src][pg] += 1
            p2p_seq = self.p2p_seq[src][pg]
        name = f"{backend}:send {self._local(src, pg, src)}->{self._local(src, pg, dst)}"
        return self.add(src, name, pg=pg, inp=size, out=copy.deepcopy(size), is_p2p=True,
                        p2p_seq=p2p_seq, **kw)

    def recv(self, dst, src, pg="0", size=None, backend="nccl", p2p_seq=None, any_source=False, **kw):
        size = [[4]] if size is None else size
        if p2p_seq is None:
            self.p2p_seq[dst][pg] += 1
            p2p_seq = self.p2p_seq[dst][pg]
        s = "?" if any_source else self._local(dst, pg, src)
        name = f"{backend}:recv {self._local(dst, pg, dst)}<-{s}"
        return self.add(dst, name, pg=pg, inp=size, out=copy.deepcopy(size), is_p2p=True,
                        p2p_seq=p2p_seq, **kw)

    def p2p_terminator(self, rank, pg="0", p2p_seq=None, backend="nccl", **kw):
        return self.add(rank, f"{backend}:coalesced", pg=pg, inp=[], out=[], in_dtypes=[],
                        out_dtypes=[], is_p2p=True,
                        p2p_seq=self.p2p_seq[rank][pg] if p2p_seq is None else p2p_seq, **kw)

    # -- dumps -----------------------------------------------------------
    def _times(self, rank, e):
        created = T0 + e["record_id"] * 1_000_000 + rank * 1_000 + 7
        started = completed = None
        if e["state"] in ("started", "completed") and self.timing:
            started = created + 120_345
        if e["state"] == "completed":
            completed = created + 480_123
        return created, started, completed

    def dump(self, rank, drop=()):
        """The dict torch's NCCL recorder pickles for `rank`."""
        d = {"version": self.version}
        d["pg_config"] = {
            name: {"name": i["name"], "desc": i["desc"], "ranks": i["ranks"]}
            for name, i in self.pgs[rank].items()
        }
        major, minor = map(int, self.version.split("."))
        if (major, minor) >= (2, 10):
            d["comm_lib_version"] = "2.27.5"
        elif (major, minor) >= (2, 7):
            d["nccl_version"] = "2.26.2"
        status = {}
        for name, i in self.pgs[rank].items():
            colls = [e for e in self.entries[rank] if e["process_group"][0] == name and not e["is_p2p"]]
            enq = max([e["collective_seq_id"] for e in colls], default=-1)
            if self.timing:
                st = max([e["collective_seq_id"] for e in colls if e["state"] in ("started", "completed")], default=-1)
            else:
                st = -1
            comp = max([e["collective_seq_id"] for e in colls if e["state"] == "completed"], default=-1)
            s = {"last_enqueued_collective": enq, "last_started_collective": st,
                 "last_completed_collective": comp}
            s.update(self.pg_status_override[rank].get(name, {}))
            status[str(i["pg_id"])] = s
        d["pg_status"] = status
        entries = []
        for e in self.entries[rank]:
            created, started, completed = self._times(rank, e)
            o = {}
            o["frames"] = e["frames"]
            o["record_id"] = e["record_id"]
            o["pg_id"] = e["pg_id"]
            o["process_group"] = e["process_group"]
            if (major, minor) >= (2, 10):
                o["thread_name"] = "pt_main_thread"
                o["thread_id"] = str(140112233445566 + rank)
            o["collective_seq_id"] = e["collective_seq_id"]
            o["p2p_seq_id"] = e["p2p_seq_id"]
            o["op_id"] = e["op_id"]
            o["profiling_name"] = e["profiling_name"]
            o["time_created_ns"] = created
            if self.timing and e["state"] == "completed":
                o["duration_ms"] = 0.359375 + 0.25 * (e["record_id"] % 4)
            o["input_sizes"] = e["input_sizes"]
            o["input_dtypes"] = e["input_dtypes"]
            o["output_sizes"] = e["output_sizes"]
            o["output_dtypes"] = e["output_dtypes"]
            o["state"] = e["state"]
            o["time_discovered_started_ns"] = started
            o["time_discovered_completed_ns"] = completed
            o["retired"] = e["retired"]
            o["timeout_ms"] = TIMEOUT_MS
            o["is_p2p"] = e["is_p2p"]
            for k in drop:
                o.pop(k, None)
            entries.append(o)
        d["entries"] = entries
        return d

    def dumps(self):
        return {r: self.dump(r) for r in range(self.world)}


def to_json_dump(d):
    """What `_dump_nccl_trace_json` writes for the same recorder state: no
    frames, 0 for a missing discovered time, pg_status values as strings,
    process_group as an array, `entries` omitted when empty, keys sorted."""
    o = {k: v for k, v in d.items() if k not in ("entries", "pg_status")}
    o["pg_status"] = {k: {kk: str(vv) for kk, vv in v.items()} for k, v in d["pg_status"].items()}
    ents = []
    for e in d["entries"]:
        j = {k: v for k, v in e.items() if k != "frames"}
        j["process_group"] = list(e["process_group"])
        for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            if j[k] is None:
                j[k] = 0
        ents.append(j)
    if ents:
        o["entries"] = ents
    return json.dumps(o, sort_keys=True, separators=(",", ":"))


# --------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------
