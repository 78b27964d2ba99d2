"""A pipeline-parallel training job as ML engineers write one by hand
(GPipe): a small transformer language model cut into four stages, one per
rank, launched by torchrun. Every step runs the micro-batches forward
through the stages, each stage sending its activations on with
`dist.send` and receiving them with `dist.recv`, then runs them backward,
each stage sending the gradient of its input back. Stage 0 reads the
inputs and the last stage the labels, each through a DataLoader. For the
scored evals corpus: nothing in it is shaped around the diagnosis.

Launcher protocol (as ddp_job.py's; the launcher is torchrun_job.py):
  python pipeline_job.py --scenario NAME --world 4 --data-dir D --ctrl-root C
                         --ready-file F
  python pipeline_job.py --list

Scenarios:
  healthy        no fault
  skipped_send   stage 2 drops a micro-batch whose tokens are all padding
                 (a rank-local filter) and sends nothing on for it: stage 3
                 waits for that activation, stage 2 goes on to its backward
                 and waits there for a gradient stage 3 never sends, stages
                 0-1 wait for gradients (the culprit is stage 2, which broke
                 its own order; stage 3 only waits for it)
  skipped_isend  the same bug in a pipeline written with torch's async
                 calls (batch_isend_irecv to receive, isend to send, every
                 Work waited for): the rows hold the launches only
  loader_stuck   one input file of stage 0 is a FIFO nobody writes (a shard
                 on a stuck mount): its DataLoader worker blocks, stage 0
                 waits for the batch, every other stage waits in recv
"""
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torchrun_job  # noqa: E402  (the launcher half shared with ddp_job.py)

STAGES = 4
MICRO = 4          # micro-batches per step
MB = 2             # samples per micro-batch
SEQ = 16
VOCAB = 64
DIM = 32
FAULT_STEP = 8
HEALTHY_STEPS = 20
SAMPLES = 400

# name: (state, category, culprit (-1 none), file, function)
SCENARIOS = {
    "healthy": ("healthy", "healthy", -1, None, None),
    "skipped_send": ("stalled", "missing_from_collective", 2, "pipeline_job.py", "receive"),
    "skipped_isend": ("stalled", "missing_from_collective", 2, "pipeline_job.py", "receive"),
    "loader_stuck": ("stalled", "cpu_stall", 0, "pipeline_job.py", "batches"),
}


# ----------------------------------------------------------- the training job

def train_main():
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.elastic.multiprocessing.errors import record
    from torch.utils.data import DataLoader, Dataset

    work = os.environ["JOB_WORK"]
    scenario = os.environ["JOB_SCENARIO"]

    class Tokens(Dataset):
        """Samples of one kind (inputs or labels), one small file each."""

        def __init__(self, root):
            self.root = root
            self.n = len([f for f in os.listdir(root) if f.startswith("sample-")])

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            with open(os.path.join(self.root, "sample-%05d.txt" % i)) as f:
                return torch.tensor([int(t) for t in f.read().split()][:SEQ], dtype=torch.long)

    def make_stage(rank):
        torch.manual_seed(rank)
        layer = nn.TransformerEncoderLayer(d_model=DIM, nhead=4, dim_feedforward=64, batch_first=True)
        if rank == 0:
            return nn.Sequential(nn.Embedding(VOCAB, DIM), layer)
        if rank == STAGES - 1:
            return nn.Sequential(layer, nn.Linear(DIM, VOCAB))
        return layer

    def batches(root):
        loader = DataLoader(Tokens(root), batch_size=MB * MICRO, num_workers=1, shuffle=False,
                            persistent_workers=True, drop_last=True)
        while True:
            for b in loader:
                yield b

    def is_padding(out):
        # The bug: a rank-local filter. This stage drops a micro-batch it
        # takes for padding and so never sends its activation on (the
        # scenario decides when it misfires).
        return scenario in ("skipped_send", "skipped_isend") and dist.get_rank() == 2 and step_no[0] == FAULT_STEP

    step_no = [0]
    use_async = scenario == "skipped_isend"
    pending = []  # async sends of this step, waited for at its end

    def receive(buf, src):
        if use_async:
            for w in dist.batch_isend_irecv([dist.P2POp(dist.irecv, buf, src)]):
                w.wait()
        else:
            dist.recv(buf, src)

    def send(t, dst):
        if use_async:
            pending.append(dist.isend(t, dst))
        else:
            dist.send(t, dst)

    def forward_micro(stage, rank, x):
        if rank == 0:
            out = stage(x)
        else:
            act = torch.empty(MB, SEQ, DIM)
            receive(act, rank - 1)
            act.requires_grad_(True)
            x = act
            out = stage(act)
        return x, out

    def backward_micro(rank, x, out, loss):
        if rank == STAGES - 1:
            loss.backward()
        else:
            grad = torch.empty_like(out)
            receive(grad, rank + 1)
            out.backward(grad)
        if rank > 0:
            send(x.grad.contiguous(), rank - 1)

    def train_step(stage, opt, rank, inputs, labels):
        x_all = next(inputs) if rank == 0 else None
        y_all = next(labels) if rank == STAGES - 1 else None
        saved = []
        loss_fn = nn.CrossEntropyLoss()
        for m in range(MICRO):
            x = x_all[m * MB:(m + 1) * MB] if rank == 0 else None
            x, out = forward_micro(stage, rank, x)
            loss = None
            if rank == STAGES - 1:
                y = y_all[m * MB:(m + 1) * MB]
                loss = loss_fn(out.reshape(-1, VOCAB), y.reshape(-1)) / MICRO
            elif m == MICRO - 1 and is_padding(out):
                continue  # dropped: nothing sent on, nothing to backward
            else:
                send(out.detach(), rank + 1)
            saved.append((x, out, loss))
        opt.zero_grad()
        for x, out, loss in saved:
            backward_micro(rank, x, out, loss)
        while pending:
            pending.pop(0).wait()
        opt.step()

    def progress(step):
        torchrun_job.write_progress(work, dist.get_rank(), step)

    @record
    def main():
        torch.set_num_threads(1)
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        with open(os.path.join(work, "pids", "rank%d" % rank), "w") as f:
            f.write(str(os.getpid()))
        stage = make_stage(rank)
        opt = torch.optim.AdamW(stage.parameters(), lr=1e-3)
        inputs = batches(os.path.join(work, "data", "inputs")) if rank == 0 else None
        labels = batches(os.path.join(work, "data", "labels")) if rank == STAGES - 1 else None
        while True:
            train_step(stage, opt, rank, inputs, labels)
            step_no[0] += 1
            progress(step_no[0])

    main()


# ----------------------------------------------------------------- the launcher

def make_data(work, scenario):
    import random

    rnd = random.Random(11)
    for kind in ("inputs", "labels"):
        d = os.path.join(work, "data", kind)
        os.makedirs(d)
        for i in range(SAMPLES):
            with open(os.path.join(d, "sample-%05d.txt" % i), "w") as f:
                f.write(" ".join(str(rnd.randrange(VOCAB)) for _ in range(SEQ)))
    if scenario == "loader_stuck":
        p = os.path.join(work, "data", "inputs", "sample-%05d.txt" % (FAULT_STEP * MB * MICRO))
        os.unlink(p)
        os.mkfifo(p)
    for sub in ("pids", "progress"):
        os.makedirs(os.path.join(work, sub))


def truth(scenario):
    state, category, culprit, file, function = SCENARIOS[scenario]
    t = {"state": state, "category": category, "culprits": "" if culprit < 0 else str(culprit)}
    if file:
        t["file"], t["function"] = file, function
    if scenario == "loader_stuck":
        # The resource: the FIFO stage 0's DataLoader worker blocks opening (make_data).
        t["resource"] = {"what": "the FIFO its DataLoader worker blocks opening",
                         "text": ["sample-%05d.txt" % (FAULT_STEP * MB * MICRO)]}
    return t


def launch(a):
    work = tempfile.mkdtemp(prefix="pipeline-job-")
    make_data(work, a.scenario)
    job = torchrun_job.Torchrun("pipeline_job", __file__, STAGES, work, a.data_dir, a.ctrl_root,
                                {"JOB_SCENARIO": a.scenario})

    def settled(steps, last, exited):
        if a.scenario == "healthy":
            return steps >= HEALTHY_STEPS, None
        return steps >= FAULT_STEP - 2 and time.time() - last > 5, last

    got = job.watch(settled, first_step=2)
    if got is None:
        job.end()
        return 0
    job.ready(a.ready_file, truth(a.scenario), got[0], got[1])
    return 0


def main():
    return torchrun_job.main(train_main, launch, SCENARIOS, STAGES, why_world="one stage per rank")


if __name__ == "__main__":
    sys.exit(main())
