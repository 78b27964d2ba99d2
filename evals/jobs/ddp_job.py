"""A data-parallel training job as ML engineers write one, launched by
torchrun, for the scored evals corpus: a small transformer language model
under DistributedDataParallel, a real DataLoader with worker processes
reading sample files, AdamW, a validation pass, and checkpoints that rank
0 saves and hands to an upload command. Nothing in it is shaped around
the diagnosis: the faults are what goes wrong in such jobs.

Launcher protocol (as socket_job.py's):
  python ddp_job.py --scenario NAME --world N --data-dir D --ctrl-root C
                    --ready-file F [--post-mortem]
  python ddp_job.py --list
starts `torchrun --standalone --nproc-per-node N` with PROBING=1, waits
until the scenario's state is reached, writes F (JSON: the ranks' pids,
the truth, when the job settled and its step time), then stays until
SIGTERM/SIGINT and ends torchrun and every rank. With --post-mortem
(loader_stuck, upload_stuck) the hung job is killed first, every process
with SIGKILL as a scheduler's time limit does, and the truth is the dead
job's.

Scenarios (the culprit is rank 2 at world 4, unless said):
  healthy           no fault
  loader_stuck      one sample file of rank 2's shard is a FIFO nobody
                    writes (a shard on a stuck network mount): its
                    DataLoader worker blocks opening it, rank 2 waits for
                    the batch, the others wait in DDP's gradient all_reduce
                    (issued from C++: the agent's wrappers never see it)
  upload_stuck      rank 0's checkpoint upload command never returns
                    (a stuck `aws s3 cp`): rank 0 waits for its child, the
                    others in the next step's gradient all_reduce
  validation_pause  every rank runs a long validation pass (busy, no
                    collective pending): a pause, not a hang
  rank_raises       rank 2 raises on a corrupt batch under torchelastic's
                    @record; torchrun ends the other ranks (post-mortem)
  metrics_skipped   every 5 steps the ranks all_reduce their loss for the
                    log, but rank 1 skips it when its batch loss is "not
                    finite" (a rank-local condition) and goes on to the next
                    step's gradient all_reduce inside backward: gloo sees
                    rank 1's gradient bucket where the loss should be and
                    aborts (SIGABRT), and torchrun stops the rest
                    (post-mortem; the culprit is the rank that skipped)
  manifest_lock     every 4 steps each rank appends to a shared manifest
                    under an flock; rank 0 keeps the lock across a barrier:
                    ranks 1-3 block in flock, rank 0 waits in the barrier
                    for them (a deadlock across processes: rank 0, which
                    holds the lock while it waits, is the culprit)
  worker_killed     the kernel's OOM killer takes one of rank 3's DataLoader
                    workers (SIGKILL): the DataLoader raises in rank 3, which
                    dies of it; torchrun stops the rest (post-mortem)
  straggler_loader  rank 1 reads its shard from a slow disk: its batches
                    take several times the others' compute, and every rank
                    steps at its pace (DDP syncs each step); still moving
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import torchrun_job  # noqa: E402  (the launcher half shared with pipeline_job.py)

BATCH = 4
SEQ = 16
VOCAB = 64
FAULT_STEP = 12
HEALTHY_STEPS = 30
POST_MORTEM = ("loader_stuck", "upload_stuck")  # the hangs that have a dead-job form
VALIDATION_S = 90
SAMPLES = 400

# name: (state, category, culprit at world 4 (-1 none), file, function)
SCENARIOS = {
    "healthy": ("healthy", "healthy", -1, None, None),
    "loader_stuck": ("stalled", "cpu_stall", 2, "ddp_job.py", "train_epoch"),
    "upload_stuck": ("stalled", "cpu_stall", 0, "ddp_job.py", "upload_checkpoint"),
    "validation_pause": ("paused", "healthy", -1, None, None),
    "rank_raises": ("dead", "dead_rank", 2, "ddp_job.py", "check_batch"),
    "metrics_skipped": ("dead", "missing_from_collective", 1, "ddp_job.py", "train_epoch"),
    "manifest_lock": ("stalled", "deadlock", 0, "ddp_job.py", "append_manifest"),
    "worker_killed": ("dead", "dead_rank", 3, "ddp_job.py", "train_epoch"),
    "straggler_loader": ("slow", "straggler", 1, None, None),
}

# What the culprit waits for, where the fault has one, and the text an
# answer that found it shows (make_data makes them; the harness in
# evals/agent.py checks the answers for them).
RESOURCES = {
    "loader_stuck": ("the FIFO its DataLoader worker blocks opening", ["sample-%05d.txt" % (FAULT_STEP * BATCH)]),
    "upload_stuck": ("the upload command that never returns", ["sleep 3600"]),
    "manifest_lock": ("the manifest file whose flock rank 0 holds", ["manifest.txt"]),
}


# ----------------------------------------------------------- the training job

def train_main():
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.elastic.multiprocessing.errors import record
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, Dataset

    work = os.environ["JOB_WORK"]
    scenario = os.environ["JOB_SCENARIO"]

    class ShardDataset(Dataset):
        """Token samples, one small file each, in this rank's shard."""

        def __init__(self, root, rank):
            self.root, self.rank = root, rank
            self.n = len([f for f in os.listdir(root) if f.startswith("sample-")])

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            if scenario == "worker_killed" and self.rank == 3 and i == FAULT_STEP * BATCH:
                os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer takes this worker
            if scenario == "straggler_loader" and self.rank == 1:
                time.sleep(0.02)  # a slow disk: every sample
            with open(os.path.join(self.root, "sample-%05d.txt" % i)) as f:
                ids = [int(t) for t in f.read().split()]
            x = torch.tensor(ids[:SEQ], dtype=torch.long)
            y = torch.tensor(ids[1:SEQ + 1], dtype=torch.long)
            return x, y

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, 32)
            layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, num_layers=2)
            self.head = nn.Linear(32, VOCAB)

        def forward(self, x):
            return self.head(self.enc(self.emb(x)))

    def check_batch(x, step):
        if scenario == "rank_raises" and dist.get_rank() == 2 and step == FAULT_STEP:
            raise ValueError("sample batch %d: token ids out of range (corrupt shard?)" % step)

    def upload_checkpoint(path):
        cmd = os.environ["UPLOAD_CMD"].split() + [path]
        subprocess.run(cmd, check=True)

    def save_checkpoint(model, opt, step):
        path = os.path.join(work, "ckpt", "step-%d.pt" % step)
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, path)
        upload_checkpoint(path)

    def validate(model):
        model.eval()
        end = time.time() + VALIDATION_S
        with torch.no_grad():
            while time.time() < end:
                x = torch.randint(0, VOCAB, (BATCH, SEQ))
                model(x).sum().item()
        model.train()

    def log_metrics(loss, step):
        t = loss.detach().clone()
        # The bug: a rank-local condition around a collective.
        if scenario == "metrics_skipped" and dist.get_rank() == 1 and step >= FAULT_STEP:
            return  # "loss not finite on this rank: skip the log"
        dist.all_reduce(t)
        return t.item() / dist.get_world_size()

    def append_manifest(step):
        import fcntl

        path = os.path.join(work, "ckpt", "manifest.txt")
        with open(path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write("rank %d step %d\n" % (dist.get_rank(), step))
            f.flush()
            if scenario == "manifest_lock" and dist.get_rank() == 0 and step >= FAULT_STEP:
                dist.barrier()  # the bug: the barrier inside the lock
            fcntl.flock(f, fcntl.LOCK_UN)

    def progress(step):
        torchrun_job.write_progress(work, dist.get_rank(), step)

    def train_epoch(model, loader, opt, loss_fn, step):
        for x, y in loader:
            check_batch(x, step)
            logits = model(x)
            loss = loss_fn(logits.reshape(-1, VOCAB), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            progress(step)
            if step % 5 == 0:
                log_metrics(loss, step)
            if scenario == "manifest_lock" and step % 4 == 0:
                if dist.get_rank() != 0 and step >= FAULT_STEP:
                    time.sleep(0.5)  # rank 0 takes the lock first
                append_manifest(step)
                dist.barrier()
            if dist.get_rank() == 0 and step % 10 == 0:
                save_checkpoint(model, opt, step)
            if scenario == "validation_pause" and step == FAULT_STEP:
                with open(os.path.join(work, "progress", "validating%d" % dist.get_rank()), "w") as f:
                    f.write(str(time.time()))
                validate(model)
        return step

    @record
    def main():
        torch.manual_seed(0)
        torch.set_num_threads(1)
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        with open(os.path.join(work, "pids", "rank%d" % rank), "w") as f:
            f.write(str(os.getpid()))
        model = DDP(TinyLM())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loss_fn = nn.CrossEntropyLoss()
        ds = ShardDataset(os.path.join(work, "data", "rank%d" % rank), rank)
        loader = DataLoader(ds, batch_size=BATCH, num_workers=2, shuffle=False, persistent_workers=True)
        step = 0
        while True:
            step = train_epoch(model, loader, opt, loss_fn, step)

    main()


# ----------------------------------------------------------------- the launcher

def make_data(work, world, scenario):
    import random

    rnd = random.Random(7)
    for r in range(world):
        d = os.path.join(work, "data", "rank%d" % r)
        os.makedirs(d)
        for i in range(SAMPLES):
            with open(os.path.join(d, "sample-%05d.txt" % i), "w") as f:
                f.write(" ".join(str(rnd.randrange(VOCAB)) for _ in range(SEQ + 1)))
    if scenario == "loader_stuck":
        p = os.path.join(work, "data", "rank2", "sample-%05d.txt" % (FAULT_STEP * BATCH))
        os.unlink(p)
        os.mkfifo(p)
    for sub in ("ckpt", "pids", "progress"):
        os.makedirs(os.path.join(work, sub))
    upload = os.path.join(work, "upload.sh")
    with open(upload, "w") as f:
        if scenario == "upload_stuck":
            f.write("#!/bin/sh\n# the object store stopped answering\nexec sleep 3600\n")
        else:
            f.write("#!/bin/sh\ncp \"$1\" \"$1.uploaded\"\n")
    os.chmod(upload, 0o755)
    return upload


def truth(scenario, world, post_mortem, watched=False):
    state, category, culprit, file, function = SCENARIOS[scenario]
    t = {"state": "dead" if post_mortem else state, "category": category,
         "culprits": "" if culprit < 0 else str(culprit)}
    if file and (not post_mortem or watched):  # SIGKILL leaves no stack; a watcher's capture does
        t["file"], t["function"] = file, function
    if scenario in RESOURCES and not post_mortem:
        t["resource"] = dict(zip(("what", "text"), RESOURCES[scenario]))
    return t


def launch(a):
    work = tempfile.mkdtemp(prefix="ddp-job-")
    upload = make_data(work, a.world, a.scenario)
    job = torchrun_job.Torchrun("ddp_job", __file__, a.world, work, a.data_dir, a.ctrl_root,
                                {"JOB_SCENARIO": a.scenario, "UPLOAD_CMD": upload,
                                 "TORCHELASTIC_ERROR_FILE": os.path.join(work, "error.json")})

    def settled(steps, last, exited):
        if a.scenario in ("healthy", "straggler_loader"):
            return steps >= HEALTHY_STEPS, None
        if a.scenario == "validation_pause":
            marks = [os.path.join(work, "progress", "validating%d" % r) for r in range(a.world)]
            return all(os.path.exists(m) for m in marks) and time.time() - last > 10, last
        if a.scenario in ("loader_stuck", "upload_stuck", "manifest_lock"):
            return steps >= FAULT_STEP - 3 and time.time() - last > 5, last
        return exited, last  # metrics_skipped, rank_raises, worker_killed: torchrun stops the job

    got = job.watch(settled)
    if got is None:
        job.end()
        return 0
    if a.post_mortem:
        if a.watch_bin:
            job.watch_until_captured(a.watch_bin, a.data_dir, a.ctrl_root)
        job.kill_all()  # a scheduler's time limit: every process SIGKILLed, nothing flushed
    job.ready(a.ready_file, truth(a.scenario, a.world, a.post_mortem, bool(a.watch_bin)), got[0], got[1])
    return 0


def main():
    return torchrun_job.main(train_main, launch, SCENARIOS, 4, POST_MORTEM, "the culprits are placed for 4 ranks")


if __name__ == "__main__":
    sys.exit(main())
