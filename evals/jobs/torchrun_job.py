"""The launcher half the torchrun jobs of the corpus share (ddp_job.py,
pipeline_job.py): start `torchrun --standalone` with the agent on, watch
the ranks' progress files until the scenario's state is reached, write the
ready file, stay until SIGTERM/SIGINT, and end torchrun and every process
of the job (DataLoader workers and children outlive a killed rank).

The training half of a job writes, per rank, <work>/pids/rank<r> (its pid)
and <work>/progress/rank<r> ("<step> <unix time>") after every step.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time


def write_progress(work, rank, step):
    """A rank's progress, replaced whole: a rank that dies mid-write (a
    DataLoader worker's death raises in the middle of its step) leaves its
    last progress, never an empty file the launcher cannot read."""
    path = os.path.join(work, "progress", "rank%d" % rank)
    with open(path + ".tmp", "w") as f:
        f.write("%d %f" % (step, time.time()))
    os.replace(path + ".tmp", path)


def read_progress(work, world):
    """{rank: (step, time)} of the ranks that stepped."""
    out = {}
    for r in range(world):
        try:
            with open(os.path.join(work, "progress", "rank%d" % r)) as f:
                s, t = f.read().split()
            out[r] = (int(s), float(t))
        except (OSError, ValueError):
            pass
    return out


def pids_of(work, world):
    out = []
    for r in range(world):
        try:
            with open(os.path.join(work, "pids", "rank%d" % r)) as f:
                out.append(int(f.read()))
        except (OSError, ValueError):
            pass
    return out


def job_pids(work):
    """Every process whose environment names this job's work dir."""
    mark = ("JOB_WORK=%s" % work).encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                if mark in f.read().split(b"\0"):
                    out.append(int(d))
        except OSError:
            pass
    return out


class Torchrun(object):
    """One job: torchrun running ``script --train`` on ``world`` ranks."""

    def __init__(self, name, script, world, work, data_dir, ctrl_root, env_extra):
        self.name, self.world, self.work = name, world, work
        env = dict(os.environ)
        for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(k, None)
        env.update({"PROBING": "1", "PROBING_DATA_DIR": data_dir, "PROBING_CTRL_ROOT": ctrl_root,
                    "PROBING_MCP_NODE": "0", "PROBING_TABLE_DEFAULT_MB": "1", "OMP_NUM_THREADS": "1",
                    "GLOO_SOCKET_IFNAME": "lo", "PYTHONUNBUFFERED": "1", "JOB_WORK": work})
        env.update(env_extra)
        self.log = open(os.path.join(work, "torchrun.log"), "w")
        self.p = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                                   str(world), "--max-restarts", "0", os.path.abspath(script), "--train"],
                                  env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.stopping = []
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.append(1))
        signal.signal(signal.SIGINT, lambda *_: self.stopping.append(1))

    def kill_all(self):
        """SIGKILL the ranks, torchrun and every process of this job's."""
        for pid in pids_of(self.work, self.world) + [self.p.pid] + job_pids(self.work):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except OSError:
            pass
        self.p.wait()

    def watch_until_captured(self, watch_bin, data_dir, ctrl_root):
        """Runs `probing-mcp watch` on the hung job until it has captured
        the evidence (as an operator's watcher would before a scheduler
        kills the job); returns what it printed, or fails the launch."""
        env = dict(os.environ, PROBING_DATA_DIR=data_dir, PROBING_CTRL_ROOT=ctrl_root)
        env.pop("PROBING_MCP_HISTORY", None)  # the data dir's, which the server reads too
        try:
            res = subprocess.run([watch_bin, "watch", "--json", "--until", "captured", "--for", "120s"],
                                 env=env, capture_output=True, text=True, timeout=180)
        except (OSError, subprocess.SubprocessError) as e:
            self.fail("probing-mcp watch: %s" % e)
        if res.returncode != 0 or '"kind":"captured"' not in res.stdout:
            self.fail("probing-mcp watch exited %d without a capture: %s %s" % (res.returncode, res.stdout[-500:], res.stderr[-500:]))
        return res.stdout

    def end(self):
        try:
            os.killpg(self.p.pid, signal.SIGTERM)
        except OSError:
            pass
        try:
            self.p.wait(20)
        except subprocess.TimeoutExpired:
            pass
        self.kill_all()
        self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def fail(self, why):
        sys.stderr.write("%s: %s\n" % (self.name, why))
        try:
            with open(os.path.join(self.work, "torchrun.log"), errors="replace") as f:
                sys.stderr.write("".join(f.readlines()[-40:]))
        except OSError:
            pass
        self.end()
        sys.exit(1)

    def watch(self, settled, first_step=3, timeout=180):
        """Polls the progress until settled(steps, last, exited) says the
        scenario's state is reached: it returns (done, settled_at) with
        steps the fewest any rank made, last the latest progress time and
        exited whether torchrun is gone. Returns (settled_at, step_s), or
        None when stopped first."""
        deadline = time.time() + timeout
        step_s, first = 0.0, None
        while not self.stopping:
            if time.time() > deadline:
                self.fail("the scenario's state was not reached in %d s" % timeout)
            time.sleep(0.2)
            prog = read_progress(self.work, self.world)
            exited = self.p.poll() is not None
            if len(prog) < self.world:
                if exited:
                    self.fail("torchrun exited %s before every rank stepped" % self.p.returncode)
                continue
            steps = min(s for s, _ in prog.values())
            if first is None and steps >= first_step:
                first = (steps, time.time())
            if first and steps > first[0]:
                step_s = (time.time() - first[1]) / (steps - first[0])
            last = max(t for _, t in prog.values())
            done, at = settled(steps, last, exited)
            if done:
                return at, step_s
            if exited:
                self.fail("torchrun exited %s" % self.p.returncode)
        return None

    def ready(self, ready_file, truth, settled_at, step_s):
        """Writes the ready file, then stays until stopped and ends the job."""
        ready = {"pids": pids_of(self.work, self.world), "truth": truth,
                 "settled_at": settled_at, "step_s": step_s, "work": self.work}
        with open(ready_file + ".tmp", "w") as f:
            json.dump(ready, f)
        os.rename(ready_file + ".tmp", ready_file)
        while not self.stopping:
            time.sleep(0.2)
        self.end()


def main(train_main, launch, scenarios, world, post_mortem=(), why_world=""):
    """The launcher protocol's command line, shared: --train runs the
    training half (torchrun's ranks), --list prints the scenarios, and
    otherwise launch(args) runs one, after the arguments are checked."""
    import argparse

    if "--train" in sys.argv:
        train_main()
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--scenario")
    ap.add_argument("--world", type=int, default=world)
    ap.add_argument("--data-dir")
    ap.add_argument("--ctrl-root")
    ap.add_argument("--ready-file")
    ap.add_argument("--post-mortem", action="store_true")
    ap.add_argument("--watch-bin", help="with --post-mortem: run `BIN watch` until it captures, then kill the job")
    a = ap.parse_args()
    if a.list:
        for name in scenarios:
            print(name, world, "post-mortem" if name in post_mortem else "")
        return 0
    if a.post_mortem and a.scenario not in post_mortem:
        if not post_mortem:
            ap.error("--post-mortem: no scenario of this job has a dead-job form")
        ap.error("--post-mortem: only %s" % ", ".join(post_mortem))
    if a.watch_bin and not a.post_mortem:
        ap.error("--watch-bin: only with --post-mortem")
    if a.scenario not in scenarios:
        ap.error("--scenario: one of %s" % ", ".join(scenarios))
    if a.world != world:
        ap.error("--world: %d (%s)" % (world, why_world))
    return launch(a)
