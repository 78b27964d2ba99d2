"""One rank of the probing-mcp demo job, with real torch.distributed (gloo).

Four ranks train a tiny model. At step HANG_STEP, rank 2 skips the
gradient all_reduce and goes on to write a checkpoint that never finishes;
the other ranks wait in that all_reduce forever. The agent is activated
first thing, exactly as the installed .pth hook would (PROBING=1).
"""
import os
import sys
import time

import probing_mcp_agent._hook  # noqa: F401  (activation, as the .pth does)

import torch
import torch.distributed as dist

HANG_STEP = int(os.environ.get("DEMO_HANG_STEP", "5"))
CULPRIT = int(os.environ.get("DEMO_CULPRIT", "2"))


def checkpoint_to_slow_disk(step):
    # The bug: a rank-local checkpoint runs inside the training loop and
    # blocks (here: forever), so this rank never joins the all_reduce.
    while True:
        time.sleep(1)


def all_reduce_grads(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1000000):
        x = torch.randn(16, 32)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if step == HANG_STEP and rank == CULPRIT:
            checkpoint_to_slow_disk(step)
        all_reduce_grads(model)
        opt.step()
        print("rank %d step %d loss %.4f" % (rank, step, loss.item()), flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
