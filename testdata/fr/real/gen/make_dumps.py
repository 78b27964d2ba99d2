#!/usr/bin/env python3
"""Produce real PyTorch Flight Recorder (FR) dumps from gloo-on-CPU runs.

Usage (from the repository root):

    /root/devenv/bin/python testdata/fr/real/gen/make_dumps.py --out testdata/fr/real

For every scenario this launches N ranks as separate OS processes (this same
script with --worker), with the Flight Recorder enabled through the environment
before init_process_group("gloo"), runs a few healthy collectives, injects a
fault, catches the resulting gloo error, and makes every rank write its dump:

  <out>/<scenario>/nccl_trace_rank_<r>        raw bytes of _dump_fr_trace()
  <out>/<scenario>_pgfix/nccl_trace_rank_<r>  same dict, pg_config rebuilt from
                                              the live process groups, re-pickled
                                              with Python pickle protocol 4
  <out>/<scenario>_json/nccl_trace_rank_<r>   raw bytes of _dump_fr_trace_json()
                                              (only for JSON_SCENARIOS)

and <out>/manifest.json with what happened on every rank.  Then (unless
--no-analyze) it runs gen/run_fr_trace.py (torch's fr_trace over every directory,
outputs in <out>/fr_trace_outputs/), gen/parse_fr_trace.py (<out>/expected.json)
and writes <out>/SHA256SUMS for all dump files.

Why a "_pgfix" copy: in the torch build this was written against, the generic
recorder used by ProcessGroupGloo registers pg_config when the backend object is
constructed, before the group name/desc are set, so every gloo PG lands under
the key "" (desc "", group-local ranks) and the last PG created wins.  Entries
carry the right ("0", "default_pg") names, so fr_trace cannot resolve them
(KeyError).  The _pgfix copy replaces only pg_config, using the names, descs and
global ranks torch.distributed itself reports in the same process at dump time.

Only the standard library and torch are used.
"""

import argparse
import datetime
import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

GLOO_TIMEOUT_S = 3          # process-group timeout handed to gloo
WATCHDOG_S = 15             # dump from a timer thread if the main thread is stuck
SYNC_WAIT_S = 25            # wait for peers to dump before exiting
SCENARIO_DEADLINE_S = 60    # parent kills a scenario's processes after this
FR_BUFFER = "2000"

# scenario -> world size
SCENARIOS = {
    "healthy": 8,
    "missing_rank": 4,
    "op_mismatch": 4,
    "size_mismatch": 4,
    "dtype_mismatch": 4,
    "dtype_mismatch_silent": 4,
    "p2p": 4,
    "subgroup_missing": 4,
    "coalesced_mismatch": 4,
}
# first rank = the one gloo aborts in that scenario (found by running it)
GATE_ORDER = {"size_mismatch": [3, 0, 1, 2], "dtype_mismatch": [0, 1, 2, 3]}
JSON_SCENARIOS = {"missing_rank", "size_mismatch", "subgroup_missing"}


# ----------------------------------------------------------------------------
# worker side
# ----------------------------------------------------------------------------

def _warmup(dist, torch, ws):
    """A few healthy collectives on the default group so the rings have history."""
    x = torch.arange(16, dtype=torch.float32)
    dist.all_reduce(x)
    dist.broadcast(x, src=0)
    outs = [torch.zeros(8) for _ in range(ws)]
    dist.all_gather(outs, torch.ones(8))
    dist.all_reduce(torch.ones(16))


def _gated_fault(ctx, enqueue):
    """Enqueue the faulty op asynchronously, one rank at a time in ctx["order"].

    Each rank waits for the ranks before it in the order, enqueues the op (which
    records the FR entry), writes a snapshot dump, lets the next rank go, and only
    then waits on the work.  The rank listed first is the one gloo kills with
    "Received data size doesn't match expected size" (an abort, not an exception):
    no peer has enqueued when it snapshots, so its dump exists before it dies.
    Ranks that survive overwrite the snapshot with their dump after the exception.
    """
    store, rank, order = ctx["store"], ctx["rank"], ctx["order"]
    key = f"fr/{ctx['scenario']}/gate"
    idx = order.index(rank)
    deadline = time.time() + 20
    while int(store.add(key, 0)) < idx and time.time() < deadline:
        time.sleep(0.02)
    work = enqueue()
    ctx["dump"]("pre_wait_snapshot", final=False)
    store.add(key, 1)
    work.wait()


def _scenario_body(name, rank, ws, dist, torch, ctx):
    """Runs the scenario; raises whatever gloo raises."""
    t = lambda *shape, dtype=torch.float32: torch.ones(*shape, dtype=dtype)  # noqa: E731
    if name == "healthy":
        _warmup(dist, torch, ws)
        dist.reduce(t(16), dst=0)
        dist.all_to_all_single(torch.zeros(4 * ws), t(4 * ws))
        dist.gather(t(4), [torch.zeros(4) for _ in range(ws)] if rank == 0 else None, dst=0)
        dist.scatter(torch.zeros(4), [t(4) for _ in range(ws)] if rank == 0 else None, src=0)
        dist.barrier()
        dist.all_reduce(t(16))
    elif name == "missing_rank":
        _warmup(dist, torch, ws)
        if rank != 2:            # rank 2 skips this all_reduce; the others time out
            dist.all_reduce(t(16))
    elif name == "op_mismatch":
        _warmup(dist, torch, ws)
        if rank == 1:            # rank 1 calls all_gather where the others all_reduce
            dist.all_gather([torch.zeros(16) for _ in range(ws)], t(16))
        else:
            dist.all_reduce(t(16))
    elif name == "size_mismatch":
        _warmup(dist, torch, ws)
        # rank 3: shape [8] vs [16].  gloo aborts (std::terminate) the rank that
        # receives more bytes than it posted, so see _gated_fault.
        _gated_fault(ctx, lambda: dist.all_reduce(t(8) if rank == 3 else t(16), async_op=True))
    elif name == "dtype_mismatch":
        _warmup(dist, torch, ws)
        # rank 1: float64 where the others use float32 (twice the bytes)
        _gated_fault(ctx, lambda: dist.all_reduce(
            t(16, dtype=torch.float64) if rank == 1 else t(16), async_op=True))
    elif name == "dtype_mismatch_silent":
        _warmup(dist, torch, ws)
        # rank 1: int32 where the others use float32: same shape, same byte count,
        # so gloo completes (with garbage) and nothing times out
        dist.all_reduce(t(16, dtype=torch.int32) if rank == 1 else t(16))
        dist.all_reduce(t(16))
    elif name == "p2p":
        _warmup(dist, torch, ws)
        if rank == 0:            # ranks 2, 3 are idle here
            dist.send(t(32), dst=1)
        elif rank == 1:
            dist.recv(torch.zeros(32), src=0)
        ops = [dist.P2POp(dist.isend, t(8), (rank + 1) % ws),
               dist.P2POp(dist.irecv, torch.zeros(8), (rank - 1) % ws)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        dist.all_reduce(t(16))
    elif name == "subgroup_missing":
        sub = ctx["sub"]         # new_group([1, 2]), desc "pair12"
        _warmup(dist, torch, ws)
        if rank in (1, 2):
            dist.all_reduce(t(4), group=sub)
        dist.all_reduce(t(16))                          # default group, all ranks
        if rank in (1, 2):
            dist.all_reduce(t(4), group=sub)
            if rank == 1:        # rank 2 skips the third subgroup all_reduce
                dist.all_reduce(t(4), group=sub)
    elif name == "coalesced_mismatch":
        _warmup(dist, torch, ws)
        dist.all_reduce_coalesced([t(2), t(3)])         # healthy coalesced
        if rank == 3:            # rank 3 passes a different tensor list
            dist.all_reduce_coalesced([t(2), t(5)])
        else:
            dist.all_reduce_coalesced([t(2), t(3)])
    else:
        raise ValueError(f"unknown scenario {name}")


def _live_pg_config(dist):
    """pg_config as torch.distributed reports it in this process (member PGs only)."""
    c10d = dist.distributed_c10d
    cfg = {}
    for pg in list(c10d._world.pg_map.keys()):
        ranks = dist.get_process_group_ranks(pg)
        if dist.get_rank() not in ranks:
            continue
        name = c10d._get_process_group_name(pg)
        cfg[name] = {"name": name, "desc": pg.group_desc, "ranks": str(list(ranks))}
    return cfg


def worker(args):
    rank, ws, scen = args.rank, args.world_size, args.scenario
    result = {"rank": rank, "scenario": scen}
    t_start = time.time()

    import torch
    import torch.distributed as dist
    import torch._C._distributed_c10d as c10d_c

    result["torch_version"] = torch.__version__
    # The TCPStore is hosted by the parent process, so that it survives a rank
    # that gloo aborts (the gating and the final sync both go through it).
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=datetime.timedelta(seconds=30))
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=ws,
        timeout=datetime.timedelta(seconds=GLOO_TIMEOUT_S),
    )
    ctx = {"store": store, "rank": rank, "scenario": scen, "order": GATE_ORDER.get(scen)}
    if scen == "subgroup_missing":
        ctx["sub"] = dist.new_group(
            [1, 2], timeout=datetime.timedelta(seconds=GLOO_TIMEOUT_S), group_desc="pair12"
        )

    lock = threading.Lock()
    state = {"dumped": False}

    def dump(trigger, final=True):
        with lock:
            if state["dumped"]:
                return
            if final:
                state["dumped"] = True
            _write_dumps(trigger)

    def _write_dumps(trigger):
        result["dump_trigger"] = trigger
        result["seconds_to_dump"] = round(time.time() - t_start, 2)
        raw = c10d_c._dump_fr_trace()
        os.makedirs(args.dir, exist_ok=True)
        with open(os.path.join(args.dir, f"nccl_trace_rank_{rank}"), "wb") as f:
            f.write(raw)
        d = pickle.loads(raw)
        result["fr_version"] = d.get("version")
        result["entries"] = len(d.get("entries", []))
        result["raw_pg_config"] = d.get("pg_config")
        result["frames_present"] = any(e.get("frames") for e in d.get("entries", []))
        # the NCCL recorder: on a gloo-only run it is expected to be empty
        try:
            nd = pickle.loads(c10d_c._dump_nccl_trace())
            result["dump_nccl_trace_entries"] = len(nd.get("entries", []))
        except Exception as e:  # noqa: BLE001
            result["dump_nccl_trace_entries"] = f"error: {e!r}"
        # pg_config repaired copy
        fixed = dict(d)
        fixed["pg_config"] = _live_pg_config(dist)
        result["live_pg_config"] = fixed["pg_config"]
        os.makedirs(args.dir + "_pgfix", exist_ok=True)
        with open(os.path.join(args.dir + "_pgfix", f"nccl_trace_rank_{rank}"), "wb") as f:
            f.write(pickle.dumps(fixed, protocol=4))
        if args.json:
            js = c10d_c._dump_fr_trace_json()
            if isinstance(js, str):
                js = js.encode()
            os.makedirs(args.dir + "_json", exist_ok=True)
            with open(os.path.join(args.dir + "_json", f"nccl_trace_rank_{rank}"), "wb") as f:
                f.write(js)

    def finish():
        try:
            store.add(f"fr/{scen}/dumped", 1)
            deadline = time.time() + SYNC_WAIT_S
            while time.time() < deadline:
                if int(store.add(f"fr/{scen}/dumped", 0)) >= ws:
                    break
                time.sleep(0.1)
        except Exception as e:  # noqa: BLE001
            result["sync_error"] = repr(e)
        print("RESULT " + json.dumps(result), flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def on_watchdog():
        try:
            dump("watchdog_thread")
        except Exception as e:  # noqa: BLE001
            result["dump_error"] = repr(e)
        finish()

    ctx["dump"] = dump
    timer = threading.Timer(WATCHDOG_S, on_watchdog)
    timer.daemon = True
    timer.start()
    try:
        _scenario_body(scen, rank, ws, dist, torch, ctx)
        result["exception"] = None
    except Exception as e:  # noqa: BLE001
        result["exception"] = f"{type(e).__name__}: {e}"[:600]
        result["seconds_to_exception"] = round(time.time() - t_start, 2)
    finally:
        try:
            dump("main_thread")
        except Exception as e:  # noqa: BLE001
            result["dump_error"] = repr(e) + traceback.format_exc()[-400:]
    timer.cancel()
    finish()


# ----------------------------------------------------------------------------
# parent side
# ----------------------------------------------------------------------------

def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run_scenario(out, scen, ws, log_dir):
    sdir = os.path.join(out, scen)
    for d in (sdir, sdir + "_pgfix", sdir + "_json"):
        if os.path.isdir(d):
            shutil.rmtree(d)
    import warnings
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch.distributed as dist
    master_store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                 timeout=datetime.timedelta(seconds=SCENARIO_DEADLINE_S))
    port = master_store.port
    env = dict(os.environ)
    env.update({
        "TORCH_FR_BUFFER_SIZE": FR_BUFFER,          # read first by torch >= 2.9
        "TORCH_NCCL_TRACE_BUFFER_SIZE": FR_BUFFER,  # older alias (deprecated here)
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(ws),
        "OMP_NUM_THREADS": "1",
    })
    procs = []
    t0 = time.time()
    for r in range(ws):
        env_r = dict(env, RANK=str(r))
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--scenario", scen,
               "--rank", str(r), "--world-size", str(ws), "--dir", sdir]
        if scen in JSON_SCENARIOS:
            cmd.append("--json")
        logf = open(os.path.join(log_dir, f"{scen}_rank{r}.log"), "w+")
        p = subprocess.Popen(cmd, env=env_r, stdout=logf, stderr=subprocess.STDOUT,
                             start_new_session=True)
        procs.append((r, p, logf))
    died = set()
    while time.time() - t0 < SCENARIO_DEADLINE_S:
        running = 0
        for r, p, _ in procs:
            rc = p.poll()
            if rc is None:
                running += 1
            elif rc != 0 and r not in died:
                # a rank killed by gloo never reaches the final sync: count it as
                # done so its peers do not wait SYNC_WAIT_S for it
                died.add(r)
                master_store.add(f"fr/{scen}/dumped", 1)
        if not running:
            break
        time.sleep(0.2)
    killed = [r for r, p, _ in procs if p.poll() is None]
    for r in killed:   # kill the whole session of every straggler
        p = procs[r][1]
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    del master_store
    results = {}
    for r, p, logf in procs:
        logf.seek(0)
        text = logf.read()
        logf.close()
        res = None
        for line in text.splitlines():
            if line.startswith("RESULT "):
                res = json.loads(line[len("RESULT "):])
        if res is None:
            tail = [ln for ln in text.splitlines()
                    if "terminate called" in ln or "what():" in ln or "Error" in ln]
            res = {"rank": r, "error": "process died without reporting (no RESULT line)",
                   "log_excerpt": tail[-4:]}
            if os.path.exists(os.path.join(sdir, f"nccl_trace_rank_{r}")):
                res["dump_trigger"] = "pre_wait_snapshot (written before the process died)"
        res["returncode"] = p.returncode
        res["killed_by_parent"] = r in killed
        for sub, key in (("", "raw"), ("_pgfix", "pgfix"), ("_json", "json")):
            path = os.path.join(sdir + sub, f"nccl_trace_rank_{r}")
            if os.path.exists(path):
                res[f"{key}_file"] = os.path.relpath(path, out)
                res[f"{key}_bytes"] = os.path.getsize(path)
                res[f"{key}_sha256"] = _sha256(path)
        results[str(r)] = res
    return {"scenario": scen, "world_size": ws, "seconds": round(time.time() - t0, 1),
            "ranks": results}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--only", nargs="*", help="subset of scenarios")
    ap.add_argument("--log-dir", help="where worker stdout/stderr go (default: a new temp dir)")
    ap.add_argument("--no-analyze", action="store_true",
                    help="only write dumps and manifest.json; skip run_fr_trace.py, "
                         "parse_fr_trace.py and SHA256SUMS")
    ap.add_argument("--tabulate-path", help="passed to run_fr_trace.py (one extra -j run)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--scenario", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world-size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="fr_gen_logs_")  # not a fixture
    os.makedirs(log_dir, exist_ok=True)
    print(f"worker logs: {log_dir}", flush=True)
    manifest_path = os.path.join(out, "manifest.json")
    manifest = {}
    if os.path.exists(manifest_path) and args.only:
        with open(manifest_path) as f:
            manifest = json.load(f)
    for scen, ws in SCENARIOS.items():
        if args.only and scen not in args.only:
            continue
        for attempt in range(1, 4):
            print(f"== {scen} ({ws} ranks) attempt {attempt}", flush=True)
            res = run_scenario(out, scen, ws, log_dir)
            res["attempt"] = attempt
            if all("raw_file" in rr for rr in res["ranks"].values()):
                break
        manifest[scen] = res
        for r, rr in res["ranks"].items():
            print(f"   rank {r}: trigger={rr.get('dump_trigger')} entries={rr.get('entries')} "
                  f"raw={rr.get('raw_bytes')}B exc={(rr.get('exception') or '')[:110]}", flush=True)
        print(f"   {res['seconds']} s", flush=True)
    manifest = {k: manifest[k] for k in SCENARIOS if k in manifest}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=False)
        f.write("\n")
    if args.no_analyze:
        return
    # torch's analyzer over every directory, then expected.json
    gen = os.path.dirname(os.path.abspath(__file__))
    cmd = [sys.executable, os.path.join(gen, "run_fr_trace.py"), "--out", out]
    if args.tabulate_path:
        cmd += ["--tabulate-path", args.tabulate_path]
    subprocess.run(cmd, check=True)
    subprocess.run([sys.executable, os.path.join(gen, "parse_fr_trace.py"), "--out", out],
                   check=True)
    # checksums of every dump file
    lines = []
    for d in sorted(os.listdir(out)):
        full = os.path.join(out, d)
        if not os.path.isdir(full) or d in ("gen", "fr_trace_outputs"):
            continue
        for n in sorted(os.listdir(full)):
            lines.append(f"{_sha256(os.path.join(full, n))}  {d}/{n}")
    with open(os.path.join(out, "SHA256SUMS"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
