"""Real torch (CPU, gloo) jobs with tensor-parallel pairs and data-parallel
groups, run with the probing-mcp in-process agent, that hang, die or
straggle on purpose: the evals corpus's real-torch scenarios, and the
fixture recorder of testdata/jobs/real.

Every rank is a plain process (no torchrun): RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT are set by the launcher. Groups (dist.new_group,
created by every rank in the same order): tensor-parallel pairs {0,1},
{2,3}, ...; data-parallel groups of the ranks with the same pair slot,
{0,2,4,6} and {1,3,5,7} (world 4: {0,2}, {1,3}). Every step:
  fake_data_loader -> forward/backward of a tiny MLP -> update_metrics
  -> tp_sync (all_reduce of the gradients on the pair) -> dp_sync
  (all_reduce on the data-parallel group) -> world_sync (all_reduce on the
  default group) -> compute (~0.1 s, a sleep: 8 ranks share 2 cores)
  -> optimizer.step()
The agent counts steps by the optimizer hooks.

Launcher protocol (/work/notes/evals-spec.md):
  python tp_gloo_job.py --scenario NAME --world N --data-dir D --ctrl-root C
                        --ready-file F [--post-mortem]
  python tp_gloo_job.py --list
starts N ranks with PROBING=1, waits (polling the ranks' own comm rings,
read with the agent's memt reader, and their logs) until the scenario's
state is reached, with --post-mortem then SIGKILLs the ranks still alive
and reaps them, writes F (JSON: pids and the truth), and stays until
SIGTERM/SIGINT, then kills and reaps every rank and exits 0.

Faults (at step FAULT_STEP, on the culprit):
  cpu_stall                  fake_data_loader sleeps forever (time.sleep loop)
  missing_from_collective_tp the culprit skips tp_sync and goes on: its
                             partner waits in the pair collective, the
                             culprit in world_sync
  missing_from_collective_wrong_group
                             tp_sync's all_reduce goes to the data-parallel
                             group: it matches the DP peers' dp_sync call, so
                             the culprit's real dp_sync is one call ahead of
                             its group and its partner waits in the pair
  collective_mismatch_op     dp_sync calls all_gather where its DP peers call
                             all_reduce: gloo hangs, every DP member inside
                             call #k of the group
  collective_mismatch_size   dp_sync all_reduces 7 more elements than its
                             peers: gloo aborts the rank that receives more
                             bytes than it expects (gloo::EnforceNotMet
                             "op.preamble.length <= op.nbytes ... Is there a
                             distributed collective mismatch", std::terminate,
                             SIGABRT) and the others die of "Connection
                             reset/closed by peer" RuntimeErrors: the job dies
  collective_mismatch_dtype  dp_sync all_reduces float64: same as _size
                             (the byte counts differ). A same-size dtype
                             change (float32 vs int32, float16 of twice the
                             count) is silent in gloo: garbage, no hang
  collective_mismatch_detail _size with TORCH_DISTRIBUTED_DEBUG=DETAIL: torch
                             compares the members' collectives first, and
                             every DP member raises "Detected mismatch between
                             collectives on ranks. Rank i is running
                             collective: CollectiveFingerPrint(...)" (i: the
                             group's rank), then the job dies as above
  dead_rank                  fake_data_loader raises an uncaught exception
  dead_rank_segv             decode_sample reads address 0 (SIGSEGV)
  dead_rank_sigkill          the culprit SIGKILLs itself (an OOM kill)
  dead_rank_forked_child     dead_rank, but a helper the culprit forked at
                             start holds its gloo sockets open: the peers
                             wait for the dead rank instead of dying too
  main_thread_dead           fake_data_loader raises; a non-daemon thread
                             (a checkpoint uploader) keeps the process alive
  deadlock                   update_metrics and the culprit's reporter thread
                             take two locks in opposite order
  gil_held                   native_prefetch calls libc sleep through
                             ctypes.PyDLL (keeps the GIL)
  unreachable_rank           a rank started without the agent (PROBING=0)
                             stalls in fake_data_loader: nothing of it can be
                             read, its peers wait for it
  all_in_collective          the launcher freezes (ptrace) the culprit's
                             default-group gloo worker threads: every rank
                             enters world_sync's all_reduce, none returns
  healthy                    no fault
  straggler                  the culprit's compute is 3x longer
What gloo does after a death (seen here): peers of a dead rank get
"Connection closed by peer" from gloo in the collective they share with it
and die of that RuntimeError too, and the deaths cascade through the
groups until every rank is gone, within a second or two.

Truth: the state, the category, the culprit ranks, and the culprit's frame
(the job's own function where the culprit's main thread is stuck, or that
raised / crashed). No frame where none can be found: healthy, straggler
(a moving rank's stack is a sample), all_in_collective (every rank in the
same library call), unreachable_rank (no agent), dead_rank_sigkill
(nothing survives a SIGKILL), and post-mortem hangs (killed with SIGKILL:
only the rings survive). For all_in_collective the culprits are every rank
inside the collective. --post-mortem is offered where the category survives
the SIGKILL (not for deadlock and gil_held: only the rings survive, which
show a rank outside every collective; nor for healthy and straggler); its
state is dead.

Fixture mode (testdata/jobs/real, the previous job: pairs and the default
group only, no DP group, 8 ranks, fault at step 6):
  python tp_gloo_job.py --scenario skip_tp|cpu_stall_tp|straggler --out DIR
freezes the ranks with SIGSTOP once the state is reached, copies the
per-pid dirs into DIR and kills the ranks.
"""
import argparse
import ctypes
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ports  # noqa: E402  (the TCPStore port, below the ephemeral range)

COMPUTE_S = 0.1
FAULT_STEP = 8          # steps before the fault: a step history
MOVING_STEPS = 12       # a healthy/straggling job is ready once every rank started this step
READY_TIMEOUT_S = 240.0
SETTLE_POLLS = 3        # the ready picture must hold this many polls in a row (1 s apart)
JOB = os.path.basename(os.path.abspath(__file__))

# name: (category, state, {world: culprit}, frame function ("" none), post-mortem allowed)
SCENARIOS = {
    "cpu_stall": ("cpu_stall", "stalled", {4: 2, 8: 5}, "fake_data_loader", True),
    "missing_from_collective_tp": ("missing_from_collective", "stalled", {4: 1, 8: 3}, "world_sync", True),
    "missing_from_collective_wrong_group": ("missing_from_collective", "stalled", {4: 2, 8: 6}, "dp_sync", True),
    "collective_mismatch_op": ("collective_mismatch", "stalled", {4: 3, 8: 6}, "dp_sync", True),
    "collective_mismatch_size": ("collective_mismatch", "dead", {4: 1, 8: 5}, "dp_sync", True),
    "collective_mismatch_dtype": ("collective_mismatch", "dead", {4: 3, 8: 7}, "dp_sync", True),
    "collective_mismatch_detail": ("collective_mismatch", "dead", {4: 1, 8: 3}, "dp_sync", True),
    "dead_rank": ("dead_rank", "dead", {4: 2, 8: 4}, "fake_data_loader", True),
    "dead_rank_segv": ("dead_rank", "dead", {4: 3, 8: 7}, "decode_sample", True),
    "dead_rank_sigkill": ("dead_rank", "dead", {4: 1, 8: 1}, "", True),
    "dead_rank_forked_child": ("dead_rank", "dead", {4: 2, 8: 6}, "fake_data_loader", True),
    "main_thread_dead": ("main_thread_dead", "stalled", {4: 1, 8: 2}, "fake_data_loader", True),
    # No post-mortem form: after a SIGKILL nothing shows the locks or the
    # GIL (only the rings, which show a rank out of every collective).
    "deadlock": ("deadlock", "stalled", {4: 3, 8: 3}, "update_metrics", False),
    "gil_held": ("gil_held", "stalled", {4: 2, 8: 4}, "native_prefetch", False),
    "all_in_collective": ("all_in_collective", "stalled", {4: 1, 8: 2}, "", True),
    "unreachable_rank": ("unreachable_rank", "stalled", {4: 3, 8: 6}, "", True),
    "healthy": ("healthy", "healthy", {4: -1, 8: -1}, "", False),
    "straggler": ("straggler", "slow", {4: 2, 8: 5}, "", False),
}
# How each scenario's ready picture looks (see ready_state).
DEAD_KINDS = ("collective_mismatch_size", "collective_mismatch_dtype", "collective_mismatch_detail", "dead_rank",
              "dead_rank_segv", "dead_rank_sigkill", "dead_rank_forked_child")
CULPRIT_IN_COLLECTIVE = ("missing_from_collective_tp", "missing_from_collective_wrong_group",
                         "collective_mismatch_op", "all_in_collective")
# A frame survives the SIGKILL of a post-mortem only where the agent wrote
# it down as the culprit died (exception records, the crash file).
FRAME_SURVIVES_KILL = ("collective_mismatch_size", "collective_mismatch_dtype", "collective_mismatch_detail", "dead_rank",
                       "dead_rank_segv", "dead_rank_forked_child", "main_thread_dead")

# Fixture mode (the previous job), name: (fault, culprit)
FIXTURES = {"skip_tp": ("missing_from_collective_tp", 3), "cpu_stall_tp": ("cpu_stall", 3),
            "straggler": ("straggler", 5)}
FIXTURE_WORLD = 8
FIXTURE_STEP = 6


# ---------------------------------------------------------------- the rank
# The job's functions have plain names: they are the frames the truth names.

class Rank(object):
    def __init__(self):
        env = os.environ
        self.fault = env["JOB_FAULT"]
        self.culprit = int(env["JOB_CULPRIT"])
        self.fault_step = int(env["JOB_FAULT_STEP"])
        self.use_dp = env["JOB_DP"] == "1"
        self.work = env["JOB_WORK"]
        self.rank = int(env["RANK"])
        self.world = int(env["WORLD_SIZE"])
        self.faulty = self.rank == self.culprit
        self.lock_a = threading.Lock()
        self.lock_b = threading.Lock()
        self.metrics = {}

    def at(self, fault, step):
        return self.faulty and self.fault == fault and step == self.fault_step

    def note(self, what):
        print("rank %d %s" % (self.rank, what), flush=True)


def decode_sample(job, step):
    if job.at("dead_rank_segv", step):
        job.note("fault")
        # The bug: a native decoder dereferences a bad pointer.
        ctypes.string_at(0)


def native_prefetch(job, step):
    if job.at("gil_held", step):
        job.note("fault")
        # A C call made through PyDLL keeps the GIL for its whole duration:
        # no other thread of the process (the agent's included) runs. The
        # loop: a signal (the agent's stack dump) ends sleep() early.
        libc = ctypes.PyDLL(None)
        while True:
            libc.sleep(10 ** 6)


def fake_data_loader(job, step, torch):
    if job.at("cpu_stall", step) or job.at("unreachable_rank", step):
        job.note("fault")
        # The bug: the loader blocks forever in Python (a CPU-side stall).
        while True:
            time.sleep(1)
    if job.at("dead_rank", step) or job.at("dead_rank_forked_child", step):
        job.note("fault")
        raise RuntimeError("rank %d: corrupt shard at step %d" % (job.rank, step))
    if job.at("main_thread_dead", step):
        job.note("fault")
        raise ValueError("rank %d: batch has no labels at step %d" % (job.rank, step))
    if job.at("dead_rank_sigkill", step):
        job.note("fault")
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does
    decode_sample(job, step)
    native_prefetch(job, step)
    return torch.randn(16, 32)


def metrics_reporter(job, started, taken):
    """The culprit's reporter thread: takes lock_b, then lock_a."""
    started.wait()
    with job.lock_b:
        taken.set()
        with job.lock_a:
            pass


def update_metrics(job, step, loss):
    if job.at("deadlock", step):
        started, taken = threading.Event(), threading.Event()
        threading.Thread(target=metrics_reporter, args=(job, started, taken), name="metrics-reporter",
                         daemon=True).start()
        with job.lock_a:
            started.set()
            taken.wait()
            job.note("fault")
            with job.lock_b:  # held by the reporter, which waits for lock_a
                pass
    with job.lock_a:
        with job.lock_b:
            job.metrics[step] = loss


def wait_for_freeze(job, step):
    """all_in_collective: the launcher freezes this rank's default-group
    gloo threads (it is the only one that may ptrace them) before this rank
    goes on into the collectives."""
    if job.at("all_in_collective", step):
        req = os.path.join(job.work, "freeze.request")
        with open(req + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(req + ".tmp", req)
        done = os.path.join(job.work, "freeze.done")
        while not os.path.exists(done):
            time.sleep(0.05)
        job.note("fault")


def tp_sync(job, step, grads, dist, pair, dp):
    if job.at("missing_from_collective_tp", step):
        return  # the bug: this rank skips its pair's all_reduce
    if job.at("missing_from_collective_wrong_group", step):
        dist.all_reduce(grads, group=dp)  # the bug: the wrong group
        return
    dist.all_reduce(grads, group=pair)


def dp_sync(job, step, grads, dist, dp, torch):
    if job.at("collective_mismatch_op", step):
        out = [torch.empty_like(grads) for _ in range(dist.get_world_size(dp))]
        dist.all_gather(out, grads, group=dp)  # the bug: peers all_reduce
        return
    if job.at("collective_mismatch_size", step) or job.at("collective_mismatch_detail", step):
        dist.all_reduce(torch.cat([grads, torch.zeros(7)]), group=dp)  # the bug: 7 more elements
        return
    if job.at("collective_mismatch_dtype", step):
        dist.all_reduce(grads.double(), group=dp)  # the bug: float64, peers float32
        return
    dist.all_reduce(grads, group=dp)


def world_sync(job, step, grads, dist):
    dist.all_reduce(grads)


def compute(job):
    time.sleep(COMPUTE_S * (3 if job.faulty and job.fault == "straggler" else 1))


def checkpoint_uploader(job):
    """main_thread_dead: a non-daemon thread, alive while it has work."""
    while True:
        time.sleep(1)


def fork_log_shipper(job):
    """dead_rank_forked_child: a forked helper process (no exec), which
    inherits every descriptor, the gloo sockets too: once the rank dies
    they stay open, so its peers wait instead of getting "Connection
    closed by peer". It ends with the launcher."""
    launcher = os.getppid()
    if os.fork() == 0:
        try:
            while os.path.exists("/proc/%d" % launcher):
                time.sleep(1)
        finally:
            os._exit(0)


def tids():
    try:
        return set(int(t) for t in os.listdir("/proc/self/task"))
    except OSError:
        return set()


def rank_main():
    import torch
    import torch.distributed as dist

    job = Rank()
    torch.set_num_threads(1)
    before = tids()
    dist.init_process_group("gloo", timeout=datetime.timedelta(hours=2))
    if job.faulty and job.fault == "all_in_collective":
        # The default group's threads (gloo's IO loop, torch's gloo work
        # threads): made by init_process_group, before any other group's.
        # (Their names are read later, by the launcher: a thread names
        # itself once it runs, maybe after init_process_group returned.)
        path = os.path.join(job.work, "default_group_tids")
        with open(path + ".tmp", "w") as f:
            f.write(" ".join(str(t) for t in sorted(tids() - before)))
        os.rename(path + ".tmp", path)
    world, rank = job.world, dist.get_rank()
    # Every rank creates every group, in the same order (new_group's rule).
    pairs = [dist.new_group([2 * i, 2 * i + 1]) for i in range(world // 2)]
    pair = pairs[rank // 2]
    dp = None
    if job.use_dp:
        dps = [dist.new_group(list(range(s, world, 2))) for s in range(2)]
        dp = dps[rank % 2]
    if job.faulty and job.fault == "dead_rank_forked_child":
        fork_log_shipper(job)
    if job.faulty and job.fault == "main_thread_dead":
        threading.Thread(target=checkpoint_uploader, args=(job,), name="checkpoint-uploader").start()
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1000000):
        print("rank %d step %d start" % (rank, step), flush=True)
        x = fake_data_loader(job, step, torch)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        update_metrics(job, step, loss.item())
        wait_for_freeze(job, step)
        grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        tp_sync(job, step, grads, dist, pair, dp)
        if dp is not None:
            dp_sync(job, step, grads, dist, dp, torch)
        world_sync(job, step, grads, dist)
        compute(job)
        off = 0
        for p in model.parameters():
            n = p.grad.numel()
            p.grad.copy_(grads[off:off + n].view_as(p.grad) / world)
            off += n
        opt.step()


# ------------------------------------------------------------ the launcher

def started(logdir, rank):
    """The last step rank ``rank`` announced it started, -1 if none."""
    last = -1
    for p in log_lines(logdir, rank):
        if len(p) == 5 and p[0] == "rank" and p[2] == "step" and p[4] == "start":
            last = int(p[3])
    return last


def log_lines(logdir, rank):
    try:
        with open(os.path.join(logdir, "rank%d.log" % rank), errors="replace") as f:
            return [line.split() for line in f]
    except FileNotFoundError:
        return []


def noted(logdir, rank, what):
    return any(p == ["rank", str(rank), what] for p in log_lines(logdir, rank))


def log_tail(logdir, rank, n=15):
    try:
        with open(os.path.join(logdir, "rank%d.log" % rank), errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except FileNotFoundError:
        return "(no log)\n"


def die_with_parent():
    """In the forked rank: SIGKILL it when the launcher dies, even of a
    SIGKILL that leaves it no finally (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass


class Ranks(object):
    """The rank processes, their dirs, and how to end them."""

    def __init__(self, world, data_dir, ctrl, work):
        self.world, self.data_dir, self.ctrl, self.work = world, data_dir, ctrl, work
        self.logdir = os.path.join(work, "logs")
        os.makedirs(self.logdir, exist_ok=True)
        self.procs = []
        self.traced = []  # tids this process ptrace-froze

    def start(self, env_extra):
        port = ports.store_port()
        for r in range(self.world):
            env = dict(os.environ)
            env.update({
                "PROBING": "1", "PROBING_DATA_DIR": self.data_dir, "PROBING_CTRL_ROOT": self.ctrl,
                "PROBING_TABLE_DEFAULT_MB": "1",
                "RANK": str(r), "WORLD_SIZE": str(self.world), "LOCAL_RANK": str(r),
                "LOCAL_WORLD_SIZE": str(self.world), "GROUP_RANK": "0",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo",
                "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "JOB_WORK": self.work,
            })
            env.update(env_extra)
            if env_extra.get("JOB_FAULT") == "collective_mismatch_detail":
                env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"  # torch checks every collective's shape first
            if env_extra.get("JOB_FAULT") == "unreachable_rank" and env_extra.get("JOB_CULPRIT") == str(r):
                env["PROBING"] = "0"  # this rank runs without the agent
            log = open(os.path.join(self.logdir, "rank%d.log" % r), "w")
            self.procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank"],
                                               env=env, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True, preexec_fn=die_with_parent))
            log.close()

    def alive(self, r):
        return self.procs[r].poll() is None

    def last_row(self, r):
        """Rank r's latest comm_collective row as a dict, None if none yet."""
        from probing_mcp_agent import memtread  # the agent this Python runs the ranks with
        path = os.path.join(self.data_dir, str(self.procs[r].pid), "python.comm_collective")
        if not os.path.exists(path):
            return None
        try:
            cols, rows = memtread.read_rows(path)
        except Exception:  # a ring being created or recycled: read it next poll
            return None
        if not rows:
            return None
        ts = cols.index("timestamp")
        return dict(zip(cols, max(rows, key=lambda row: row[ts])))

    def inside(self, r, step):
        """Whether rank r's ring shows it inside a collective of ``step``."""
        row = self.last_row(r)
        return row is not None and row["duration_ms"] == -1 and row["global_step"] == step

    def kill(self):
        for p in self.procs:
            # The whole group, even when the rank itself is gone: what it
            # forked is in its session.
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
        # Traced threads are reaped by their tracer (this process) before
        # their thread group can be.
        for t in self.traced:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    pid, _ = os.waitpid(t, os.WNOHANG | 0x40000000)  # __WALL
                except ChildProcessError:
                    break
                if pid:
                    break
                time.sleep(0.05)
        self.traced = []
        for p in self.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                sys.stderr.write("%s: rank pid %d did not die after SIGKILL\n" % (JOB, p.pid))

    def freeze_threads(self, pid, tids):
        """Stops just these threads of pid (ptrace interrupt), leaving the
        rest of the process running."""
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        libc.ptrace.restype = ctypes.c_long
        PTRACE_SEIZE, PTRACE_INTERRUPT = 0x4206, 0x4207
        for t in tids:
            if libc.ptrace(PTRACE_SEIZE, t, None, None) != 0:
                self.fail("ptrace(SEIZE, %d) of pid %d: %s" % (t, pid, os.strerror(ctypes.get_errno())))
            self.traced.append(t)
            if libc.ptrace(PTRACE_INTERRUPT, t, None, None) != 0:
                self.fail("ptrace(INTERRUPT, %d) of pid %d: %s" % (t, pid, os.strerror(ctypes.get_errno())))
            os.waitpid(t, 0x40000000)  # __WALL: until it is stopped

    def fail(self, why):
        msg = ["%s: %s" % (JOB, why)]
        for r in range(self.world):
            state = "alive" if self.alive(r) else "exited %s" % self.procs[r].returncode
            msg.append("--- rank %d (pid %d, %s), log tail:\n%s" % (r, self.procs[r].pid, state,
                                                                 log_tail(self.logdir, r)))
        raise Failure("\n".join(msg))


class Failure(Exception):
    pass


class Interrupted(Exception):
    pass


def ready_state(sc, ranks, culprit, step):
    """(ready, what is missing) for scenario sc's picture."""
    world, logdir = ranks.world, ranks.logdir
    if sc in ("healthy", "straggler"):
        for r in range(world):
            if not ranks.alive(r):
                ranks.fail("rank %d exited" % r)
            if started(logdir, r) < MOVING_STEPS:
                return False, "rank %d has not started step %d" % (r, MOVING_STEPS)
        return True, ""
    if sc in DEAD_KINDS:
        if sc.startswith("dead_rank") and ranks.alive(culprit):
            return False, "rank %d is alive" % culprit
        if all(ranks.alive(r) for r in range(world)):
            return False, "no rank died"
        for r in range(world):
            if ranks.alive(r) and not ranks.inside(r, step):
                return False, "rank %d is alive and not inside a collective of step %d" % (r, step)
        return True, ""
    # Hangs: every rank alive, nobody past the fault step, the waiting
    # ranks inside a collective of that step, the culprit at its fault.
    for r in range(world):
        if not ranks.alive(r):
            ranks.fail("rank %d exited" % r)
        s = started(logdir, r)
        if s > step:
            ranks.fail("rank %d started step %d, past the fault step %d: no hang" % (r, s, step))
        if s < step:
            return False, "rank %d is at step %d" % (r, s)
    for r in range(world):
        if r == culprit and sc not in CULPRIT_IN_COLLECTIVE:
            continue
        if not ranks.inside(r, step):
            return False, "rank %d is not inside a collective of step %d" % (r, step)
    if sc not in ("missing_from_collective_tp", "missing_from_collective_wrong_group", "collective_mismatch_op"):
        if not noted(logdir, culprit, "fault"):
            return False, "rank %d has not reached its fault" % culprit
    if sc == "main_thread_dead":
        exc = os.path.join(ranks.data_dir, str(ranks.procs[culprit].pid), ".exceptions.jsonl")
        try:
            with open(exc) as f:
                if '"main_thread_exit"' not in f.read():
                    return False, "rank %d's agent has not recorded its main thread's end" % culprit
        except FileNotFoundError:
            return False, "rank %d has no exception record" % culprit
    return True, ""


def maybe_freeze(ranks, culprit):
    """all_in_collective: the culprit asks, the launcher freezes."""
    req = os.path.join(ranks.work, "freeze.request")
    if not os.path.exists(req) or os.path.exists(os.path.join(ranks.work, "freeze.done")):
        return
    pid = ranks.procs[culprit].pid
    tids = []
    with open(os.path.join(ranks.work, "default_group_tids")) as f:
        for t in f.read().split():
            try:
                with open("/proc/%d/task/%s/comm" % (pid, t)) as c:
                    name = c.read().strip()
            except OSError:
                continue
            # torch's gloo work threads of the default group: they run its
            # collectives; the IO loop and the store are left running.
            if name == "pt_gloo_runloop":
                tids.append(int(t))
    if not tids:
        ranks.fail("rank %d made no pt_gloo_runloop thread in init_process_group" % culprit)
    ranks.freeze_threads(pid, tids)
    with open(os.path.join(ranks.work, "freeze.done"), "w") as f:
        f.write(" ".join(map(str, tids)))


def write_ready(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.rename(path + ".tmp", path)


def rankset(rs):
    out, rs = [], sorted(rs)
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else "%d-%d" % (rs[i], rs[j]))
        i = j + 1
    return ",".join(out)


def truth(sc, world, post_mortem):
    category, state, culprits, function, _ = SCENARIOS[sc]
    culprit = culprits[world]
    if sc == "all_in_collective":
        names = rankset(range(world))
    elif culprit < 0:
        names = ""
    else:
        names = str(culprit)
    if post_mortem:
        state = "dead"
        if sc not in FRAME_SURVIVES_KILL:
            function = ""
    t = {"state": state, "category": category, "culprits": names,
         "file": JOB if function else "", "function": function}
    if sc == "deadlock" and not post_mortem:
        # The resource: the thread that holds the lock update_metrics waits for.
        t["resource"] = {"what": "the reporter thread holding the other lock", "text": ["metrics-reporter"]}
    return t


def _on_signal(signum, frame):
    raise Interrupted("signal %d" % signum)


def launch(args):
    sc, world = args.scenario, args.world
    category, state, culprits, function, pm_ok = SCENARIOS[sc]
    if world not in culprits:
        sys.stderr.write("%s: --world %d: scenario %s supports worlds %s\n" % (JOB, world, sc, sorted(culprits)))
        return 2
    if args.post_mortem and not pm_ok:
        sys.stderr.write("%s: scenario %s has no post-mortem form (--list shows which have): a killed moving job "
                         "has no culprit; a killed deadlock or GIL holder leaves nothing that shows it\n" % (JOB, sc))
        return 2
    culprit = culprits[world]
    for d in (args.data_dir, args.ctrl_root):
        os.makedirs(d, exist_ok=True)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    work = tempfile.mkdtemp(prefix="tp-gloo-%s-%d-" % (sc, world))
    ranks = None
    ready = False
    try:
        ranks = Ranks(world, args.data_dir, args.ctrl_root, work)
        ranks.start({
            "JOB_FAULT": sc, "JOB_CULPRIT": str(culprit), "JOB_FAULT_STEP": str(FAULT_STEP), "JOB_DP": "1"})
        deadline = time.monotonic() + args.timeout
        held = 0
        why = "nothing polled yet"
        while held < SETTLE_POLLS:
            if time.monotonic() > deadline:
                ranks.fail("timed out after %ds waiting for the %s state: %s" % (args.timeout, sc, why))
            if sc == "all_in_collective":
                maybe_freeze(ranks, culprit)
            ok, why = ready_state(sc, ranks, culprit, FAULT_STEP)
            held = held + 1 if ok else 0
            time.sleep(1.0 if ok else 0.3)
        if args.post_mortem:
            ranks.kill()
        write_ready(args.ready_file, {"pids": [p.pid for p in ranks.procs],
                                      "truth": truth(sc, world, args.post_mortem)})
        ready = True
        print("%s: %s world %d ready (%s); logs in %s" % (JOB, sc, world,
                                                         "post-mortem" if args.post_mortem else "live", work),
              flush=True)
        while True:
            time.sleep(3600)
    except Interrupted:
        if not ready:
            sys.stderr.write("%s: interrupted before the %s state was reached\n" % (JOB, sc))
            return 2
        return 0
    except Failure as e:
        sys.stderr.write(str(e) + "\n")
        return 2
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if ranks is not None:
            ranks.kill()


# ------------------------------------------------- fixture mode (the old job)

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


def record_fixture(args):
    if os.path.exists(args.out):
        raise SystemExit("%s exists: remove it first" % args.out)
    fault, culprit = FIXTURES[args.scenario]
    work = tempfile.mkdtemp(prefix="tp-gloo-%s-" % args.scenario)
    data_dir, ctrl = os.path.join(work, "data"), os.path.join(work, "ctrl")
    os.mkdir(data_dir)
    os.mkdir(ctrl)
    ranks = Ranks(FIXTURE_WORLD, data_dir, ctrl, work)
    try:
        ranks.start({"JOB_FAULT": fault, "JOB_CULPRIT": str(culprit), "JOB_FAULT_STEP": str(FIXTURE_STEP),
                     "JOB_DP": "0"})
        deadline = time.monotonic() + args.timeout
        while True:
            for r in range(FIXTURE_WORLD):
                if not ranks.alive(r):
                    ranks.fail("rank %d exited" % r)
            if time.monotonic() > deadline:
                ranks.fail("timed out after %ds" % args.timeout)
            if fault == "straggler":
                if started(ranks.logdir, culprit) >= 12:
                    break
            elif all(started(ranks.logdir, r) >= FIXTURE_STEP for r in range(FIXTURE_WORLD)):
                time.sleep(5)  # the hang is established; the agent flushes every ~0.5 s
                for r in range(FIXTURE_WORLD):
                    if started(ranks.logdir, r) != FIXTURE_STEP:
                        ranks.fail("rank %d went past step %d: no hang" % (r, FIXTURE_STEP))
                break
            time.sleep(0.2)
        for p in ranks.procs:
            os.killpg(p.pid, signal.SIGSTOP)  # no ring is copied mid-write
        copy_pid_dirs(data_dir, args.out)
        print("pids: " + " ".join("rank%d=%d" % (r, p.pid) for r, p in enumerate(ranks.procs)))
        print("copied %s -> %s (work dir %s)" % (data_dir, args.out, work))
    except Failure as e:
        sys.stderr.write(str(e) + "\n")
        return 2
    finally:
        ranks.kill()
    return 0


def main():
    if sys.argv[1:2] == ["--rank"]:
        return rank_main()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the scenarios and their worlds")
    ap.add_argument("--scenario", choices=sorted(SCENARIOS) + sorted(FIXTURES))
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--data-dir")
    ap.add_argument("--ctrl-root")
    ap.add_argument("--ready-file")
    ap.add_argument("--post-mortem", action="store_true")
    ap.add_argument("--out", help="fixture mode: dir to create (must not exist), for skip_tp, cpu_stall_tp, straggler")
    ap.add_argument("--timeout", type=int, default=int(READY_TIMEOUT_S), help="seconds to wait for the state")
    args = ap.parse_args()
    if args.list:
        for name, (_, _, culprits, _, pm) in SCENARIOS.items():
            print("%s %s%s" % (name, ",".join(str(w) for w in sorted(culprits)), " post-mortem" if pm else ""))
        return 0
    if args.out:
        if args.scenario not in FIXTURES:
            ap.error("--out records the fixtures %s, not %s" % (", ".join(sorted(FIXTURES)), args.scenario))
        return record_fixture(args)
    if args.scenario not in SCENARIOS:
        ap.error("--scenario %s is a fixture (use --out DIR) or unknown; --list shows the scenarios" % args.scenario)
    missing = [f for f in ("scenario", "data_dir", "ctrl_root", "ready_file") if not getattr(args, f)]
    if missing:
        ap.error("missing %s (or --list)" % ", ".join("--" + m.replace("_", "-") for m in missing))
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
