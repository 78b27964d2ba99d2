"""A torch-free job for the scored evals corpus: plain Python ranks that
synchronise over TCP, with one fault per scenario and its known answer.

Launcher protocol: docs in /work/notes/evals-spec.md, summarised here:
  python socket_job.py --scenario NAME --world N --data-dir D --ctrl-root C
                       --ready-file F [--post-mortem]
  python socket_job.py --list
starts N rank processes with the probing-mcp agent active, waits until
the scenario's state is reached, writes F (JSON: pids and the truth), then
stays until SIGTERM/SIGINT and kills every rank. Stdlib only.

The job. Ranks form tensor-parallel pairs {0,1}, {2,3}, ... and the
default group of all ranks. Every step:
  load_batch -> native_preprocess -> forward_backward (compute, a sleep)
  -> sync_tensor_parallel (all_reduce on the pair) -> sync_data_parallel
  (all_reduce on the default group).
The collectives go through sockcomm (site-packages/sockcomm.py, a
stand-in for torch.distributed) to the "fabric": a reducer thread in this
launcher process standing for the network, which completes a collective
once every member contributed with the same op and size, and never
answers a mismatched one (as a real collective hangs on a size mismatch).

Faults, at step FAULT_STEP on the culprit (pair partner = culprit ^ 1):
  cpu_stall                the data loader sleeps forever (in Python) before
                           the pair all_reduce: the partner waits in the pair
                           collective, the others in the default one
  unrecorded_cpu_stall     the same, in a job whose collectives nothing
                           records (SOCKCOMM_RECORD=0): no clock, so the state
                           is unknown; the stacks still name the culprit
  missing_from_collective  the culprit skips the pair all_reduce and enters the
                           default one: the partner waits in the pair
                           collective, everyone else (culprit too) in the default
  collective_mismatch      the culprit's default-group all_reduce is one element
                           short; everyone waits in it forever
  collective_mismatch_op   the culprit calls all_gather where the others call
                           all_reduce, on the default group
  dead_rank                forward_backward raises; the process dies of it
  main_thread_dead         forward_backward raises; a non-daemon thread
                           (a metrics exporter) keeps the process alive
  deadlock                 save_checkpoint starts two threads taking two locks
                           in opposite order, and joins them: never returns
  gil_held                 native_preprocess calls libc sleep through
                           ctypes.PyDLL, which keeps the GIL
  all_in_collective        the fabric stops answering the default group: every
                           rank is inside the same all_reduce
  healthy                  no fault
  straggler                the culprit's compute is 3x longer; still stepping

Truth (what a correct diagnosis says): the state, the category, the
culprit ranks, and the culprit's frame: the job's own function where the
culprit is stuck (its main thread's innermost frame outside library code),
or, for a rank whose main thread died of an exception, the function that
raised. No frame is expected where there is none to find: healthy jobs,
a straggler (a moving rank's stack is a sample, not a place),
all_in_collective (every rank is in the same library call), and
post-mortem cpu_stall / missing_from_collective (killed with SIGKILL: no
stack of the culprit survives, only the rings). For all_in_collective the
culprits are every rank inside the collective: no rank waits for another.
Where the fault has a resource the culprit waits on (the launcher protocol's
optional "resource": what it is, and the text an answer that found it
shows), the truth names it: here the deadlock's two writer threads.
"""
import argparse
import json
import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
AGENT_PATH = os.path.join(REPO, "agent", "python")
LIB_PATH = os.path.join(HERE, "site-packages")

FAULT_STEP = 10      # steps before the fault: a step history for the diagnosis
# A moving job is ready once every rank has done this many steps: the
# diagnosis weighs the last 16 (32 collectives), and these must be steady
# ones, past the first second's start-up (the agent's own threads starting,
# modules imported lazily), which can slow one rank for a few steps.
HEALTHY_STEPS = 40
# One step's compute (a sleep: many ranks share small machines);
# SOCKET_JOB_COMPUTE_S makes a slow job (the watcher's soak).
COMPUTE_S = float(os.environ.get("SOCKET_JOB_COMPUTE_S") or 0.05)
SETTLE_S = 2.0       # after the hang's picture is reached: the agents' flushers (0.5 s) write it
READY_TIMEOUT_S = 180.0

# name: (category, worlds, post-mortem allowed)
SCENARIOS = {
    "cpu_stall": ("cpu_stall", (4, 8), True),
    "unrecorded_cpu_stall": ("cpu_stall", (4, 8), False),
    "missing_from_collective": ("missing_from_collective", (4, 8), True),
    "collective_mismatch": ("collective_mismatch", (4, 8), False),
    "collective_mismatch_op": ("collective_mismatch", (4, 8), False),
    "dead_rank": ("dead_rank", (4, 8), True),
    "main_thread_dead": ("main_thread_dead", (4, 8), False),
    "deadlock": ("deadlock", (4, 8), False),
    "gil_held": ("gil_held", (4, 8), False),
    "all_in_collective": ("all_in_collective", (4, 8), False),
    "healthy": ("healthy", (4, 8), False),
    "straggler": ("straggler", (4, 8), False),
}
CULPRIT = {4: 2, 8: 5}    # not rank 0, and a different pair slot per world
STRAGGLER = {4: 1, 8: 6}


# ------------------------------------------------------------------ the rank
# Everything the rank does is in module-level functions with plain names:
# they are the frames the truth names.

class Job(object):
    def __init__(self):
        env = os.environ
        self.rank = int(env["RANK"])
        self.world = int(env["WORLD_SIZE"])
        self.scenario = env["EVAL_SCENARIO"]
        self.culprit = int(env["EVAL_CULPRIT"])
        self.faulty = self.rank == self.culprit
        self.port = int(env["EVAL_FABRIC_PORT"])


def load_batch(job, step):
    if job.faulty and step == FAULT_STEP and job.scenario in ("cpu_stall", "unrecorded_cpu_stall"):
        job.comm.note("fault")
        # The bug: a rank-local data source that stops producing.
        while True:
            time.sleep(1)
    return [float(step + job.rank + i) for i in range(4)]


def native_preprocess(job, step, batch):
    if job.faulty and step == FAULT_STEP and job.scenario == "gil_held":
        job.comm.note("fault")
        # A C call made through PyDLL keeps the GIL for its whole duration:
        # no other thread of the process (the agent's included) runs. A
        # signal (the stack dump's) ends sleep() early, so it loops, as
        # a native call that does not return would.
        while True:
            job.libc.sleep(10 ** 6)
    return batch


def forward_backward(job, step, batch):
    compute = COMPUTE_S
    if job.faulty and job.scenario == "straggler":
        compute *= 3
    time.sleep(compute)
    if job.faulty and step == FAULT_STEP and job.scenario in ("dead_rank", "main_thread_dead"):
        job.comm.note("fault")
        raise FloatingPointError("rank %d: loss is NaN at step %d" % (job.rank, step))
    return [b * 0.5 for b in batch]


def sync_tensor_parallel(job, grads):
    return job.tp.all_reduce(grads)


def sync_data_parallel(job, step, grads):
    if job.faulty and step == FAULT_STEP:
        if job.scenario == "collective_mismatch":
            # The bug: this rank's gradient bucket is one element short.
            return job.dp.all_reduce(grads[:-1])
        if job.scenario == "collective_mismatch_op":
            return job.dp.all_reduce(grads, op="all_gather")
    return job.dp.all_reduce(grads)


def _take(first, second, both_held):
    with first:
        both_held.wait()
        with second:
            pass


def save_checkpoint(job, step):
    if not (job.faulty and step == FAULT_STEP and job.scenario == "deadlock"):
        return
    # The bug: the shard writer takes shard then index, the index writer
    # index then shard. The barrier makes the interleaving certain.
    shard, index = threading.Lock(), threading.Lock()
    both = threading.Barrier(2)
    writers = [threading.Thread(target=_take, args=(shard, index, both), name="shard-writer", daemon=True),
               threading.Thread(target=_take, args=(index, shard, both), name="index-writer", daemon=True)]
    for t in writers:
        t.start()
    job.comm.note("fault")
    for t in writers:
        t.join()


def export_metrics(job):
    # A non-daemon thread: the process outlives its main thread.
    while True:
        time.sleep(0.2)


def train(job):
    import sockcomm

    job.comm = sockcomm.Comm("127.0.0.1", job.port, job.rank, job.world)
    job.tp = job.comm.new_group([job.rank & ~1, job.rank | 1])
    job.dp = job.comm.new_group(range(job.world))
    if job.scenario == "gil_held":
        import ctypes

        job.libc = ctypes.PyDLL(None)
    if job.faulty and job.scenario == "main_thread_dead":
        threading.Thread(target=export_metrics, args=(job,), name="metrics-exporter", daemon=False).start()
    try:
        from probing_mcp_agent import steptiming

        set_step = steptiming.set_step
    except Exception:
        set_step = None
    for step in range(10 ** 9):
        if set_step is not None:
            set_step(global_step=step)
        save_checkpoint(job, step)
        batch = load_batch(job, step)
        batch = native_preprocess(job, step, batch)
        grads = forward_backward(job, step, batch)
        if not (job.faulty and step == FAULT_STEP and job.scenario == "missing_from_collective"):
            grads = sync_tensor_parallel(job, grads)
        else:
            job.comm.note("fault")  # the bug: the pair all_reduce is skipped
        sync_data_parallel(job, step, grads)
        print("rank %d step %d done" % (job.rank, step), flush=True)


def _die_with_parent(parent):
    # The ranks must not outlive the launcher, even if it is SIGKILLed.
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    if os.getppid() != parent:
        os._exit(1)


def rank_main():
    _die_with_parent(int(os.environ["EVAL_LAUNCHER_PID"]))
    import probing_mcp_agent._hook  # noqa: F401  (activation from PROBING, as the .pth does)

    train(Job())


# ---------------------------------------------------------------- the fabric

class Fabric(object):
    """The reducer standing for the network. Its view of who is inside
    which collective is the launcher's way to know the hang has settled;
    nothing of it reaches the agents."""

    def __init__(self, world, stop_default_at=None):
        self.world = world
        self.stop_default_at = stop_default_at  # all_in_collective: this seq of the default group never completes
        self.lock = threading.Lock()
        self.rounds = {}     # (group, seq) -> {rank: (op, n, values, conn)}
        self.inside = {}     # rank -> (group, seq): the collective it waits in
        self.done = {}       # rank -> completed default-group collectives
        self.notes = {}      # rank -> [text]
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(world * 2)
        self.port = self.ls.getsockname()[1]
        self.closed = False
        # One thread serves every connection: with a thread per rank, the
        # order in which those threads got the GIL would order the ranks'
        # collectives, the same ranks last every time (a straggler made by
        # the fabric). Ready connections are served in a shuffled order.
        threading.Thread(target=self._loop, daemon=True, name="fabric").start()

    def _loop(self):
        sel = selectors.DefaultSelector()
        sel.register(self.ls, selectors.EVENT_READ)
        bufs = {}
        while not self.closed:
            try:
                events = sel.select(timeout=0.5)
            except OSError:
                return
            random.shuffle(events)
            for key, _ in events:
                if key.fileobj is self.ls:
                    try:
                        c, _ = self.ls.accept()
                    except OSError:
                        continue
                    bufs[c] = b""
                    sel.register(c, selectors.EVENT_READ)
                    continue
                c = key.fileobj
                try:
                    chunk = c.recv(65536)
                except OSError:
                    chunk = b""
                if not chunk:  # the rank is gone: its pending collectives stay pending
                    sel.unregister(c)
                    bufs.pop(c, None)
                    continue
                bufs[c] += chunk
                while b"\n" in bufs[c]:
                    line, bufs[c] = bufs[c].split(b"\n", 1)
                    try:
                        m = json.loads(line)
                    except ValueError:
                        continue
                    if m.get("kind") == "note":
                        with self.lock:
                            self.notes.setdefault(m["rank"], []).append(m["text"])
                    elif m.get("kind") == "coll":
                        self._contribute(m, c)

    def _contribute(self, m, c):
        group, seq, rank = tuple(m["group"]), m["seq"], m["rank"]
        key = (group, seq)
        with self.lock:
            r = self.rounds.setdefault(key, {})
            r[rank] = (m["op"], len(m["values"]), m["values"], c)
            self.inside[rank] = key
            if len(r) < len(group):
                return
            shapes = set((op, n) for op, n, _, _ in r.values())
            if len(shapes) != 1:
                return  # a mismatched collective: nobody is answered
            if len(group) == self.world and self.stop_default_at is not None and seq >= self.stop_default_at:
                return  # the network stopped answering
            del self.rounds[key]
            n = len(m["values"])
            total = [sum(v[2][i] for v in r.values()) for i in range(n)]
            reply = (json.dumps({"values": total}) + "\n").encode()
            for rk, v in r.items():
                self.inside.pop(rk, None)
                if len(group) == self.world:
                    self.done[rk] = self.done.get(rk, 0) + 1
            conns = [v[3] for v in r.values()]
        # In arrival order, the last to arrive would always be answered last,
        # start its next step last and arrive last again: a straggler made
        # by the fabric. A shuffled order favours nobody.
        random.shuffle(conns)
        for conn in conns:
            try:
                conn.sendall(reply)
            except OSError:
                pass

    def snapshot(self):
        with self.lock:
            return dict(self.inside), dict(self.done), {k: list(v) for k, v in self.notes.items()}

    def close(self):
        self.closed = True
        try:
            self.ls.close()
        except OSError:
            pass


# --------------------------------------------------------------- the launcher

def truth(scenario, world, post_mortem):
    cat = SCENARIOS[scenario][0]
    c = CULPRIT[world]
    t = {"state": "stalled", "category": cat, "culprits": str(c), "file": "socket_job.py", "function": ""}
    t["function"] = {
        "cpu_stall": "load_batch",
        "missing_from_collective": "sync_data_parallel",
        "collective_mismatch": "sync_data_parallel",
        "dead_rank": "forward_backward",
        "main_thread_dead": "forward_backward",
        "deadlock": "save_checkpoint",
        "gil_held": "native_preprocess",
    }.get(cat, "")
    if cat == "dead_rank" or post_mortem:
        t["state"] = "dead"
    if scenario.startswith("unrecorded_"):
        t["state"] = "unknown"  # nothing times the job
    if cat == "all_in_collective":
        t["culprits"] = "0-%d" % (world - 1)
    elif cat == "healthy":
        t["state"], t["culprits"] = "healthy", ""
    elif cat == "straggler":
        t["state"], t["culprits"] = "slow", str(STRAGGLER[world])
    if post_mortem and cat in ("cpu_stall", "missing_from_collective"):
        t["function"] = ""  # SIGKILLed: no stack of the culprit survives
    if not t["function"]:
        t["file"] = ""
    if cat == "deadlock" and not post_mortem:
        # The resource: the two threads (save_checkpoint's writers) that
        # hold each other's lock; an answer that finds the cause names both.
        t["resource"] = {"what": "the two writer threads holding each other's lock", "text": ["shard-writer", "index-writer"]}
    return t


def settled(scenario, world, procs, fabric):
    """Whether the scenario's picture is reached (the hang: every rank
    where it must be; a moving job: enough steps), and if not, why."""
    inside, done, notes = fabric.snapshot()
    cat = SCENARIOS[scenario][0]
    if cat in ("healthy", "straggler"):
        low = min(done.get(r, 0) for r in range(world))
        return low >= HEALTHY_STEPS, "fewest default-group collectives done: %d of %d" % (low, HEALTHY_STEPS)
    c = CULPRIT[world]
    dp, tp = tuple(range(world)), (c & ~1, c | 1)
    want = {}
    for r in range(world):
        want[r] = tp if r == (c ^ 1) else dp
    if cat in ("collective_mismatch", "all_in_collective"):
        want = {r: dp for r in range(world)}
    elif cat == "missing_from_collective":
        want[c] = dp
    else:
        want[c] = None  # not in a collective: its own fault
    for r, g in sorted(want.items()):
        at = inside.get(r)
        if g is not None and (at is None or at[0] != g):
            return False, "rank %d is in %s, not yet in group %s" % (r, at, list(g))
    if cat in ("cpu_stall", "missing_from_collective", "deadlock", "gil_held", "main_thread_dead", "dead_rank"):
        if "fault" not in notes.get(c, []):
            return False, "the culprit (rank %d) has not reached its fault" % c
    if cat == "dead_rank" and procs[c].poll() is None:
        return False, "the culprit (rank %d) has not died yet" % c
    if cat == "main_thread_dead" and procs[c].poll() is not None:
        return False, "the culprit (rank %d) exited (rc %s); its exporter thread should keep it alive" % (c, procs[c].returncode)
    return True, ""


def _log_tail(path, n=15):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 8192))
            lines = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join("    " + ln for ln in lines[-n:])
    except OSError as e:
        return "    (no log: %s)" % e


class Terminated(Exception):
    pass


def _on_signal(signum, frame):
    raise Terminated()


def kill_all(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                try:
                    p.kill()
                except OSError:
                    pass
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            sys.stderr.write("socket_job: rank pid %d did not die after SIGKILL\n" % p.pid)


def write_ready(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.rename(tmp, path)


def launch(args):
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    # If whoever started us dies without stopping us, we stop as on SIGTERM
    # (and kill the ranks): nothing is left behind.
    _parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    if os.getppid() != _parent:
        return 2
    cat, worlds, pm_ok = SCENARIOS[args.scenario]
    if args.world not in worlds:
        sys.stderr.write("socket_job: scenario %s supports worlds %s, not %d\n" % (args.scenario, worlds, args.world))
        return 2
    if args.post_mortem and not pm_ok:
        sys.stderr.write("socket_job: scenario %s has no post-mortem form (those with one: %s)\n" % (
            args.scenario, ", ".join(n for n, s in SCENARIOS.items() if s[2])))
        return 2
    for d in (args.data_dir, args.ctrl_root):
        os.makedirs(d, exist_ok=True)
    logdir = os.path.join(os.path.dirname(os.path.abspath(args.ready_file)), "socket_job-logs")
    os.makedirs(logdir, exist_ok=True)
    fabric = Fabric(args.world, stop_default_at=(FAULT_STEP + 1) if cat == "all_in_collective" else None)
    procs, logs = [], []
    try:
        env0 = dict(os.environ)
        for k in ("PROBING", "PROBING_MCP_AGENT", "PROBING_ORIGINAL"):
            env0.pop(k, None)
        pp = [AGENT_PATH, LIB_PATH] + ([env0["PYTHONPATH"]] if env0.get("PYTHONPATH") else [])
        for r in range(args.world):
            env = dict(env0)
            env.update({
                "PROBING": "1", "PROBING_DATA_DIR": args.data_dir, "PROBING_CTRL_ROOT": args.ctrl_root,
                "PYTHONPATH": os.pathsep.join(pp), "PYTHONUNBUFFERED": "1",
                "RANK": str(r), "WORLD_SIZE": str(args.world), "LOCAL_RANK": str(r),
                "LOCAL_WORLD_SIZE": str(args.world), "GROUP_RANK": "0",
                "EVAL_SCENARIO": args.scenario, "EVAL_CULPRIT": str(STRAGGLER[args.world] if cat == "straggler" else CULPRIT[args.world]),
                "EVAL_FABRIC_PORT": str(fabric.port), "EVAL_LAUNCHER_PID": str(os.getpid()),
            })
            if args.scenario.startswith("unrecorded_"):
                env["SOCKCOMM_RECORD"] = "0"
            lp = os.path.join(logdir, "rank%d.log" % r)
            with open(lp, "wb") as lf:
                procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank-main"],
                                              stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT,
                                              env=env, start_new_session=True))
            logs.append(lp)
        launched = time.time()
        deadline = time.monotonic() + READY_TIMEOUT_S
        why = ""
        while True:
            ok, why = settled(args.scenario, args.world, procs, fabric)
            if ok:
                break
            expected_dead = CULPRIT[args.world] if cat == "dead_rank" else -1
            gone = [r for r, p in enumerate(procs) if p.poll() is not None and r != expected_dead]
            if gone:
                why = "rank(s) %s exited unexpectedly (%s)" % (gone, ", ".join(str(procs[r].returncode) for r in gone))
                break
            if time.monotonic() > deadline:
                why = "timed out after %.0f s: %s" % (READY_TIMEOUT_S, why)
                break
            time.sleep(0.1)
        if not ok:
            sys.stderr.write("socket_job: scenario %s world %d did not reach its state: %s\n" % (args.scenario, args.world, why))
            for r, lp in enumerate(logs):
                sys.stderr.write("  rank %d (pid %d, rc %s), log tail:\n%s\n" % (r, procs[r].pid, procs[r].poll(), _log_tail(lp)))
            return 2
        settled_at = time.time()
        # The job's pace as it ran (start-up included, so an over-estimate):
        # on a loaded machine steps slow down, and the diagnosis's stall
        # threshold (10 typical steps) with them; the scorer waits for it.
        _, done, _ = fabric.snapshot()
        steps = max(1, min(done.get(r, 0) for r in range(args.world)))
        step_s = round((settled_at - launched) / steps, 3)
        if cat not in ("healthy", "straggler"):
            time.sleep(SETTLE_S)
        if args.post_mortem:
            kill_all(procs)
        write_ready(args.ready_file, {"pids": [p.pid for p in procs],
                                      "truth": truth(args.scenario, args.world, args.post_mortem),
                                      "settled_at": settled_at, "step_s": step_s, "logs": logdir})
        while True:
            for p in procs:
                p.poll()  # reap: a zombie would still look alive
            time.sleep(0.2)
    except Terminated:
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        kill_all(procs)
        fabric.close()


def main(argv=None):
    if argv is None and sys.argv[1:2] == ["--rank-main"]:
        return rank_main()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the scenarios and their worlds")
    ap.add_argument("--scenario", choices=sorted(SCENARIOS))
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--data-dir")
    ap.add_argument("--ctrl-root")
    ap.add_argument("--ready-file")
    ap.add_argument("--post-mortem", action="store_true")
    args = ap.parse_args(argv)
    if args.list:
        for name, (_, worlds, pm) in SCENARIOS.items():
            print("%s %s%s" % (name, ",".join(str(w) for w in worlds), " post-mortem" if pm else ""))
        return 0
    missing = [f for f in ("scenario", "data_dir", "ctrl_root", "ready_file") if not getattr(args, f)]
    if missing:
        ap.error("missing %s (or --list)" % ", ".join("--" + m.replace("_", "-") for m in missing))
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
