"""A real 8-rank torch (CPU, gloo) job with tensor-parallel pairs, run with
the probing-mcp in-process agent, that hangs (or straggles) on purpose, and
the launcher that records what the agent left in its data dir as fixtures.

Every rank is a plain process (no torchrun): RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT are set by the launcher. Pairs {0,1},{2,3},{4,5},
{6,7} come from dist.new_group. Every step: a fake data loader, a tiny
model's forward/backward, an all_reduce of the flattened gradients on the
rank's pair group, an all_reduce on the default group, ~0.1 s of compute
(a sleep: 8 ranks share a small machine), optimizer.step().

Scenarios (SCENARIO in the rank's environment):
  skip_tp       at step 6 rank 3 skips its pair all_reduce and goes straight
                to the default one: rank 2 waits in the pair collective,
                everyone else in the default one. Culprit 3, missing from
                the pair collective.
  cpu_stall_tp  at step 6 rank 3 sleeps forever in the data loader, before
                its pair all_reduce: rank 2 waits in the pair collective,
                the others in the default one. Culprit 3, CPU stall.
  straggler     no hang: rank 5's compute is 3x longer (0.3 s); the job keeps
                stepping at rank 5's pace. State slow, straggler rank 5.

Launcher:
  python tp_gloo_job.py --scenario skip_tp --out testdata/diag/real/skip_tp
It starts the 8 ranks with PROBING=1 and fresh PROBING_DATA_DIR /
PROBING_CTRL_ROOT dirs, waits for the scenario's state (a hang: every
non-stuck rank started step 6, then 5 s more; the straggler: rank 5 started
step 12), freezes every rank with SIGSTOP (so no ring is copied mid-write),
copies the per-pid dirs (rings and dot files, no sockets) into --out, then
kills the ranks.
"""
import argparse
import datetime
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

WORLD = 8
STOP_STEP = 6
CULPRIT = 3
STRAGGLER = 5
COMPUTE_S = 0.1
SCENARIOS = ("skip_tp", "cpu_stall_tp", "straggler")


# ---------------------------------------------------------------- the rank

def fake_data_loader(step, rank, scenario, torch):
    if scenario == "cpu_stall_tp" and rank == CULPRIT and step == STOP_STEP:
        # The bug: the loader blocks forever in Python (a CPU-side stall).
        while True:
            time.sleep(1)
    return torch.randn(16, 32)


def rank_main():
    import torch
    import torch.distributed as dist

    scenario = os.environ["SCENARIO"]
    dist.init_process_group("gloo", timeout=datetime.timedelta(hours=2))
    rank = dist.get_rank()
    # Every rank creates every pair group, in the same order (new_group's rule).
    pairs = [dist.new_group([2 * i, 2 * i + 1]) for i in range(WORLD // 2)]
    pair = pairs[rank // 2]
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    compute = COMPUTE_S * (3 if scenario == "straggler" and rank == STRAGGLER else 1)
    for step in range(1000000):
        print("rank %d step %d start" % (rank, step), flush=True)
        x = fake_data_loader(step, rank, scenario, torch)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        skip = scenario == "skip_tp" and rank == CULPRIT and step == STOP_STEP
        if not skip:
            dist.all_reduce(grads, group=pair)  # tensor-parallel pair
        dist.all_reduce(grads)                   # default group
        time.sleep(compute)
        off = 0
        for p in model.parameters():
            n = p.grad.numel()
            p.grad.copy_(grads[off:off + n].view_as(p.grad) / WORLD)
            off += n
        opt.step()


# ------------------------------------------------------------ the launcher

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def started(logdir, rank):
    """The last step rank ``rank`` announced it started, -1 if none."""
    last = -1
    try:
        with open(os.path.join(logdir, "rank%d.log" % rank)) as f:
            for line in f:
                p = line.split()
                if len(p) == 5 and p[0] == "rank" and p[2] == "step" and p[4] == "start":
                    last = int(p[3])
    except FileNotFoundError:
        pass
    return last


def wait_for(what, cond, procs, timeout):
    """Polls ``cond`` until true; fails if a rank exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not cond():
        for r, p in enumerate(procs):
            if p.poll() is not None:
                raise SystemExit("rank %d exited (%s) while waiting for %s" % (r, p.returncode, what))
        if time.monotonic() > deadline:
            raise SystemExit("timed out after %ds waiting for %s" % (timeout, what))
        time.sleep(0.2)


def copy_pid_dirs(data_dir, out):
    """Copies each <pid>/ dir (rings, dot files; never sockets or FIFOs)."""
    os.makedirs(out)
    for name in sorted(os.listdir(data_dir)):
        src = os.path.join(data_dir, name)
        if not (name.isdigit() and os.path.isdir(src)):
            continue
        dst = os.path.join(out, name)
        os.mkdir(dst)
        for f in sorted(os.listdir(src)):
            fp = os.path.join(src, f)
            if os.path.isfile(fp) and not os.path.islink(fp):
                shutil.copy2(fp, os.path.join(dst, f))


def launch(args):
    if os.path.exists(args.out):
        raise SystemExit("%s exists: remove it first" % args.out)
    work = tempfile.mkdtemp(prefix="tp-gloo-%s-" % args.scenario)
    data_dir, ctrl, logdir = (os.path.join(work, d) for d in ("data", "ctrl", "logs"))
    for d in (data_dir, ctrl, logdir):
        os.mkdir(d)
    port = free_port()
    procs = []
    try:
        for r in range(WORLD):
            env = dict(os.environ)
            env.update({
                "PROBING": "1", "PROBING_DATA_DIR": data_dir, "PROBING_CTRL_ROOT": ctrl,
                "PROBING_TABLE_DEFAULT_MB": "1",
                "RANK": str(r), "WORLD_SIZE": str(WORLD), "LOCAL_RANK": str(r),
                "LOCAL_WORLD_SIZE": str(WORLD), "GROUP_RANK": "0",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo",
                "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "SCENARIO": args.scenario,
            })
            log = open(os.path.join(logdir, "rank%d.log" % r), "w")
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank"],
                                          env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
            log.close()
        if args.scenario == "straggler":
            wait_for("rank %d to start step 12" % STRAGGLER,
                     lambda: started(logdir, STRAGGLER) >= 12, procs, args.timeout)
        else:
            # Every rank but the culprit reaches step 6 (the culprit's partner
            # too: it then waits in the pair collective); the culprit stops
            # in it, so it announces step 6 as well.
            wait_for("every rank to start step %d" % STOP_STEP,
                     lambda: all(started(logdir, r) >= STOP_STEP for r in range(WORLD)),
                     procs, args.timeout)
            time.sleep(5)  # the hang is established; the agent flushes every ~0.5 s
            for r in range(WORLD):
                if started(logdir, r) != STOP_STEP:
                    raise SystemExit("rank %d went past step %d: no hang" % (r, STOP_STEP))
        for p in procs:
            os.killpg(p.pid, signal.SIGSTOP)
        copy_pid_dirs(data_dir, args.out)
        print("pids: " + " ".join("rank%d=%d" % (r, p.pid) for r, p in enumerate(procs)))
        print("copied %s -> %s (work dir %s)" % (data_dir, args.out, work))
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def main():
    if "--rank" in sys.argv[1:]:
        return rank_main()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", required=True, choices=SCENARIOS)
    ap.add_argument("--out", required=True, help="fixture dir to create (must not exist)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds to wait for the state")
    launch(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
