#!/usr/bin/env python3
"""Overhead of the agent's recorders on a CPU gloo training loop.

    python agent/python/bench/overhead.py [--ranks 2] [--blocks 40] [--steps 10]
        [--bucket-kb 0] [--what all|collectives|steps|wrappers]

Starts --ranks processes (torch.distributed, gloo, localhost). Each trains
a small MLP: forward, backward, all_reduce of the gradients (one call per
parameter by default, or flattened buckets of --bucket-kb), optimizer step.
The agent is activated the way the core does it (fr.configure_env();
recorders.start(); fr.install_watchdog_hook()) before torch is imported, so
Flight Recorder is on in both modes.

Blocks of --steps steps alternate between the recorders ON (collective
wrappers installed and recording, optimizer step hook installed: every
collective and every step writes a row) and OFF (the original
torch.distributed functions put back and the step hook removed: no agent
code on the path at all), in the order ON OFF OFF ON ..., all ranks
switching at the same step after a barrier. The first step of a block is
dropped. Per rank:

1. end to end: the median over adjacent (ON, OFF) block pairs of the
   relative difference of their median step times. Honest, but on a small
   shared machine it is dominated by scheduling: with 2 vCPUs for 2 ranks
   that spin in gloo, a *no-op* wrapper (--what wrappers) moves it by
   several percent either way.
2. on the training thread: the time spent inside the agent, measured in
   the same run by timing shims put around the agent's wrappers and around
   the functions they call (the same shims in OFF blocks cancel their own
   cost), plus the optimizer hook's own time; wall and thread CPU time.
3. the flusher thread's CPU time (rows are encoded and written there).
Each divided by the median OFF step time; "total CPU" is 2 + 3.

Needs torch (a CPU build is fine). Prints a JSON summary on the last line.
"""

import argparse
import functools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)  # agent/python


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Shims(object):
    """Timing shims: inner ones around the torch functions, outer ones
    around whatever torch.distributed exposes on top of them (the agent's
    wrappers, or nothing)."""

    def __init__(self, dist, ops):
        self.dist, self.ops = dist, [o for o in ops if getattr(dist, o, None) is not None]
        self.orig = dict((o, getattr(dist, o)) for o in self.ops)
        self.inner = [0.0, 0, 0.0]  # wall s, calls, thread CPU s
        self.outer = [0.0, 0, 0.0]

    @staticmethod
    def _shim(fn, acc):
        perf, cpu = time.perf_counter, time.thread_time

        @functools.wraps(fn)  # the agent reads the signature through __wrapped__
        def shim(*args, **kwargs):
            t0, c0 = perf(), cpu()
            try:
                return fn(*args, **kwargs)
            finally:
                acc[0] += perf() - t0
                acc[2] += cpu() - c0
                acc[1] += 1
        return shim

    def install_inner(self):
        for o in self.ops:
            setattr(self.dist, o, self._shim(self.orig[o], self.inner))

    def install_outer(self):
        for o in self.ops:
            setattr(self.dist, o, self._shim(getattr(self.dist, o), self.outer))

    def restore(self):
        for o in self.ops:
            setattr(self.dist, o, self.orig[o])

    def take(self):
        v = (self.outer[0] - self.inner[0], self.outer[1], self.outer[2] - self.inner[2])
        self.inner[:] = [0.0, 0, 0.0]
        self.outer[:] = [0.0, 0, 0.0]
        return v


def rank_main(a):
    sys.path.insert(0, PKG_ROOT)
    from probing_mcp_agent import collectives, fr, recorders, steptiming, tables

    fr.configure_env()
    recorders.start()
    fr.install_watchdog_hook()

    import resource

    import torch
    import torch.distributed as dist
    import torch.optim.optimizer as optmod

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    layers = []
    for i in range(a.layers):
        layers += [torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(a.hidden, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    params = list(model.parameters())
    x = torch.randn(a.batch, a.hidden)

    # gradient buckets of about --bucket-kb (0: one all_reduce per parameter)
    buckets, cur, size = [], [], 0
    for p in params:
        cur.append(p)
        size += p.numel() * p.element_size()
        if a.bucket_kb <= 0 or size >= a.bucket_kb * 1024:
            buckets.append(cur)
            cur, size = [], 0
    if cur:
        buckets.append(cur)

    def step():
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=False)
        loss.backward()
        for b in buckets:
            if len(b) == 1:
                dist.all_reduce(b[0].grad)
                continue
            flat = torch.cat([p.grad.reshape(-1) for p in b])
            dist.all_reduce(flat)
            off = 0
            for p in b:
                n = p.numel()
                p.grad.copy_(flat[off:off + n].view_as(p.grad))
                off += n
        opt.step()

    # the optimizer hook's own time
    hook_time = [0.0, 0.0]  # wall, thread CPU
    real_hook = steptiming._post_hook

    def timed_hook(*args):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return real_hook(*args)
        finally:
            hook_time[0] += time.perf_counter() - t0
            hook_time[1] += time.thread_time() - c0
    steptiming._post_hook = timed_hook

    collectives.unpatch()  # the shims must capture torch's own functions
    steptiming.uninstall()
    shims = Shims(dist, list(collectives.OPS))
    shimmed = a.what != "steps"

    def set_mode(on):
        steptiming.uninstall()
        collectives.unpatch()
        shims.restore()
        if shimmed:
            shims.install_inner()
        if on and a.what in ("all", "collectives", "wrappers"):
            collectives.patch(dist)
            collectives.set_enabled(a.what != "wrappers")
        if shimmed:
            shims.install_outer()
        if on and a.what in ("all", "steps"):
            steptiming._install_hooks(optmod)

    set_mode(False)
    for _ in range(a.warmup):
        step()
    pattern = (1, 0, 0, 1)
    times = {0: [], 1: []}
    agent = {0: [0.0, 0, 0.0], 1: [0.0, 0, 0.0]}  # shim-measured wall s outside torch, calls, CPU s
    usage = {0: [0, 0, 0, 0.0], 1: [0, 0, 0, 0.0]}  # minor faults, vol./invol. ctx switches, cpu s
    blocks = []
    for b in range(a.blocks):
        on = pattern[b % 4]
        set_mode(on)
        dist.barrier()
        step()  # first step of a block: dropped
        shims.take()
        bt = []
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        h0, hc0 = hook_time
        for s in range(a.steps):
            t0 = time.perf_counter()
            step()
            bt.append(time.perf_counter() - t0)
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        t, n, c = shims.take()
        agent[on][0] += t + (hook_time[0] - h0 if on else 0.0)
        agent[on][1] += n
        agent[on][2] += c + (hook_time[1] - hc0 if on else 0.0)
        u = usage[on]
        u[0] += ru1.ru_minflt - ru0.ru_minflt
        u[1] += ru1.ru_nvcsw - ru0.ru_nvcsw
        u[2] += ru1.ru_nivcsw - ru0.ru_nivcsw
        u[3] += (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        times[on].extend(bt)
        blocks.append((on, statistics.median(bt)))
    tables.flush()
    flusher_cpu = tables.flusher_cpu[0]
    set_mode(True)
    st = tables.stats()
    rows = dict((k, v.get("appended", 0)) for k, v in st.items() if k.startswith("python."))
    out = {"rank": rank, "on": times[1], "off": times[0], "collectives_per_step": len(buckets),
           "blocks": blocks, "agent": agent, "usage": usage, "rows": rows, "flusher_cpu_s": flusher_cpu}
    with open(os.path.join(a.out, "rank%d.json" % rank), "w") as f:
        json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


def _per_step(u, n):
    return {"minflt": u[0] / float(n), "nvcsw": u[1] / float(n), "nivcsw": u[2] / float(n),
            "cpu_us": u[3] / float(n) * 1e6}


def summarize(d, nsteps):
    on, off = statistics.median(d["on"]), statistics.median(d["off"])
    pairs = []
    b = d["blocks"]
    for i in range(0, len(b) - 1, 2):
        (o1, t1), (o2, t2) = b[i], b[i + 1]
        if o1 == o2:
            continue
        ton, toff = (t1, t2) if o1 else (t2, t1)
        pairs.append((ton - toff) / toff * 100.0)
    a_on, a_off = d["agent"]["1"], d["agent"]["0"]
    # shim overhead per call from OFF blocks, subtracted from ON calls
    shim_per_call = a_off[0] / a_off[1] if a_off[1] else 0.0
    agent_s = a_on[0] - shim_per_call * a_on[1]
    agent_us_step = agent_s / nsteps * 1e6
    shim_cpu_per_call = a_off[2] / a_off[1] if a_off[1] else 0.0
    agent_cpu_us_step = (a_on[2] - shim_cpu_per_call * a_on[1]) / nsteps * 1e6
    flusher_us_step = d.get("flusher_cpu_s", 0.0) / nsteps * 1e6
    return {"rank": d["rank"], "median_on_ms": on * 1e3, "median_off_ms": off * 1e3,
            "end_to_end_pct": statistics.median(pairs) if pairs else (on - off) / off * 100.0,
            "end_to_end_pairs": len(pairs),
            "agent_us_per_step": agent_us_step,
            "agent_us_per_collective": agent_us_step / max(1, d["collectives_per_step"]),
            "agent_pct": agent_us_step / (off * 1e6) * 100.0,
            "agent_cpu_us_per_step": agent_cpu_us_step,
            "agent_cpu_pct": agent_cpu_us_step / (off * 1e6) * 100.0,
            "flusher_cpu_us_per_step": flusher_us_step,
            "total_cpu_pct": (agent_cpu_us_step + flusher_us_step) / (off * 1e6) * 100.0,
            "collectives_per_step": d["collectives_per_step"], "rows": d["rows"],
            "per_step_on": _per_step(d["usage"]["1"], nsteps), "per_step_off": _per_step(d["usage"]["0"], nsteps)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--blocks", type=int, default=40)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--bucket-kb", type=int, default=0,
                    help="all_reduce gradients in buckets of about this size (0: one call per parameter)")
    ap.add_argument("--what", default="all", choices=("all", "collectives", "steps", "wrappers"),
                    help="what ON installs: everything (default), only the collective recorder, only the "
                         "step hook, or the collective wrappers with recording disabled")
    ap.add_argument("--data-dir", default="",
                    help="PROBING_DATA_DIR of the ranks (default: a fresh dir under /dev/shm, else under $TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep the data dir (rings) and per-rank results")
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank >= 0:
        return rank_main(a)
    work = tempfile.mkdtemp(prefix="probing-bench-")
    data = a.data_dir or (tempfile.mkdtemp(prefix="probing-bench-", dir="/dev/shm")
                          if os.path.isdir("/dev/shm") else os.path.join(work, "data"))
    try:
        return run(a, work, data)
    finally:
        if not a.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
            if not a.data_dir:
                shutil.rmtree(data, ignore_errors=True)


def run(a, work, data):
    port = free_port()
    procs = []
    for r in range(a.ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.ranks), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PROBING_DATA_DIR=data)
        cmd = [sys.executable, os.path.abspath(__file__), "--rank", str(r), "--out", work] + \
            [x for k in ("blocks", "steps", "warmup", "hidden", "layers", "batch", "bucket_kb", "what")
             for x in ("--" + k.replace("_", "-"), str(getattr(a, k)))]
        procs.append(subprocess.Popen(cmd, env=env))
    rc = [p.wait() for p in procs]
    if any(rc):
        print("a rank failed: exit codes %s" % rc, file=sys.stderr)
        return 1
    nsteps = a.steps * (a.blocks // 2)
    per_rank = []
    for r in range(a.ranks):
        with open(os.path.join(work, "rank%d.json" % r)) as f:
            per_rank.append(summarize(json.load(f), nsteps))
    for p in per_rank:
        print("rank %(rank)d: step %(median_off_ms).3f ms off / %(median_on_ms).3f ms on; "
              "end to end %(end_to_end_pct)+.2f%% (median of %(end_to_end_pairs)d block pairs); "
              "on the training thread %(agent_us_per_step).1f us/step wall = %(agent_pct).2f%%, "
              "%(agent_cpu_us_per_step).1f us/step CPU = %(agent_cpu_pct).2f%%; flusher thread "
              "%(flusher_cpu_us_per_step).1f us/step CPU; total CPU %(total_cpu_pct).2f%% "
              "(%(collectives_per_step)d collectives/step)" % p)
    summary = {
        "ranks": a.ranks, "python": sys.version.split()[0],
        "median_step_ms_off": statistics.median(p["median_off_ms"] for p in per_rank),
        "agent_pct_median": statistics.median(p["agent_pct"] for p in per_rank),
        "agent_pct_max": max(p["agent_pct"] for p in per_rank),
        "agent_cpu_pct_median": statistics.median(p["agent_cpu_pct"] for p in per_rank),
        "total_cpu_pct_median": statistics.median(p["total_cpu_pct"] for p in per_rank),
        "total_cpu_pct_max": max(p["total_cpu_pct"] for p in per_rank),
        "end_to_end_pct_median": statistics.median(p["end_to_end_pct"] for p in per_rank),
        "per_rank": per_rank, "args": dict((k, v) for k, v in vars(a).items() if k not in ("rank", "out", "keep")),
    }
    print("agent on the training thread: median %.2f%% of the step (wall; max %.2f%%), %.2f%% CPU; "
          "agent total CPU incl. the flusher thread: median %.2f%% (max %.2f%%); end to end: median %+.2f%%"
          % (summary["agent_pct_median"], summary["agent_pct_max"], summary["agent_cpu_pct_median"],
             summary["total_cpu_pct_median"], summary["total_cpu_pct_max"], summary["end_to_end_pct_median"]))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
