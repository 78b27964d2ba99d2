#!/usr/bin/env python3
"""What the Flight Recorder the agent turns on costs a training loop.

    python agent/python/bench/fr_overhead.py [--ranks 2] [--rounds 6] [--steps 300]
        [--hidden 256] [--layers 3] [--batch 64]

The agent sets TORCH_FR_BUFFER_SIZE=2000 when the job left it unset, so
that every collective, DDP's and FSDP's from C++ included, is in a ring
the diagnosis reads (their order and creation times are its clock). This
measures that choice: a DistributedDataParallel MLP (gloo, localhost)
trained --steps steps per run, in runs that alternate the recorder off
(TORCH_FR_BUFFER_SIZE=0) and on (2000), --rounds of each, the order
flipped every round. torch reads the variable when the process group is
created, so each run is its own set of processes. Per run the median step
time of rank 0 after a warm-up; the result is the median over rounds of
the relative difference of each (on, off) pair, the recorder's entries
per step (from a snapshot of the last run with it on), and, where the call
is all there is, the median time of a 1-element all_reduce in a tight loop
of 2000, on and off.

Needs torch (a CPU build is fine). Prints a JSON summary on the last line.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

WORKER = r'''
import json, os, sys, time
import torch, torch.distributed as dist
from torch import nn
steps, hidden, layers, batch, out = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                     int(sys.argv[4]), sys.argv[5])
torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
mods = []
for i in range(layers):
    mods += [nn.Linear(hidden, hidden), nn.ReLU()]
model = nn.parallel.DistributedDataParallel(nn.Sequential(*mods, nn.Linear(hidden, 1)), bucket_cap_mb=1)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(batch, hidden)
times = []
for s in range(steps):
    t0 = time.perf_counter()
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
# The recorder's cost per collective, where the call is all there is: a
# tight loop of 1-element all_reduces.
tiny = torch.zeros(1)
dist.barrier()
t0 = time.perf_counter()
for _ in range(2000):
    dist.all_reduce(tiny)
per_call_us = (time.perf_counter() - t0) / 2000 * 1e6
entries = -1
if os.environ.get("TORCH_FR_BUFFER_SIZE") != "0" and dist.get_rank() == 0:
    import pickle
    import torch._C._distributed_c10d as c
    try:
        entries = len(pickle.loads(c._dump_fr_trace(True, True)).get("entries", []))
    except Exception:
        entries = -2
dist.barrier()
if dist.get_rank() == 0:
    with open(out, "w") as f:
        json.dump({"times": times, "entries": entries, "per_call_us": per_call_us}, f)
dist.barrier()
# Not destroy_process_group: gloo's teardown sometimes aborts ("terminate
# called without an active exception"), which says nothing of the steps.
os._exit(0)
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(a, fr_on, work, i):
    script = os.path.join(work, "worker.py")
    out = os.path.join(work, "out%d.json" % i)
    port = free_port()
    procs = []
    for r in range(a.ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.ranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
                   TORCH_FR_BUFFER_SIZE="2000" if fr_on else "0")
        env.pop("PROBING", None)
        procs.append(subprocess.Popen([sys.executable, script, str(a.steps), str(a.hidden), str(a.layers),
                                       str(a.batch), out], env=env))
    for p in procs:
        if p.wait(timeout=600) != 0:
            sys.exit("a rank exited %d" % p.returncode)
    with open(out) as f:
        res = json.load(f)
    warm = len(res["times"]) // 5
    return statistics.median(res["times"][warm:]), res["entries"], res["per_call_us"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="fr-overhead-")
    with open(os.path.join(work, "worker.py"), "w") as f:
        f.write(WORKER)
    diffs, ons, offs, entries = [], [], [], -1
    calls = {True: [], False: []}
    for i in range(a.rounds):
        order = (False, True) if i % 2 == 0 else (True, False)
        got = {}
        for j, on in enumerate(order):
            got[on] = run(a, on, work, 2 * i + j)
        on_s, entries, _ = got[True]
        off_s = got[False][0]
        for on in (True, False):
            calls[on].append(got[on][2])
        ons.append(on_s)
        offs.append(off_s)
        diffs.append((on_s - off_s) / off_s)
        print("round %d: step off %.2f ms, on %.2f ms (%+.1f%%)" % (i, off_s * 1e3, on_s * 1e3, 100 * diffs[-1]),
              file=sys.stderr)
    summary = {"ranks": a.ranks, "rounds": a.rounds, "steps": a.steps,
               "step_off_ms": round(statistics.median(offs) * 1e3, 3),
               "step_on_ms": round(statistics.median(ons) * 1e3, 3),
               "overhead_pct_median": round(100 * statistics.median(diffs), 2),
               "overhead_pct_min_max": [round(100 * min(diffs), 2), round(100 * max(diffs), 2)],
               "fr_entries_in_last_snapshot": entries,
               "tiny_all_reduce_us_off": round(statistics.median(calls[False]), 2),
               "tiny_all_reduce_us_on": round(statistics.median(calls[True]), 2)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
