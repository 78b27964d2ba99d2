"""One rank of the probing-mcp demo job, without torch.

Four plain Python ranks synchronise every step through a tiny all-reduce
over TCP (rank 0 hosts it). At step HANG_STEP, rank 2 gets stuck in a fake
data loader; the other ranks wait in the all-reduce forever. The agent is
activated first thing, exactly as the installed .pth hook would.
"""
import os
import socket
import struct
import sys
import threading
import time

import probing_mcp_agent
import probing_mcp_agent._hook  # noqa: F401  (activation, as the .pth does)

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
PORT = int(os.environ["MASTER_PORT"])
HANG_STEP = int(os.environ.get("DEMO_HANG_STEP", "5"))
CULPRIT = int(os.environ.get("DEMO_CULPRIT", "2"))


def serve_allreduce(listener):
    """Rank 0's reducer: sums one float per rank per step, sends the sum back."""
    conns = [listener.accept()[0] for _ in range(WORLD)]
    while True:
        vals = []
        for c in conns:
            b = c.recv(8)
            if len(b) < 8:
                return
            vals.append(struct.unpack("<d", b)[0])
        total = struct.pack("<d", sum(vals))
        for c in conns:
            c.sendall(total)


def connect():
    for _ in range(200):
        try:
            return socket.create_connection(("127.0.0.1", PORT))
        except OSError:
            time.sleep(0.05)
    raise SystemExit("rank %d: cannot reach the reducer" % RANK)


def all_reduce(sock, value):
    # Recorded like a torch collective (python.comm_collective), so the
    # rings show who waits in which all-reduce, torch or not.
    with probing_mcp_agent.record_collective("all_reduce", range(WORLD), rank=RANK, nbytes=8):
        sock.sendall(struct.pack("<d", value))
        b = b""
        while len(b) < 8:
            chunk = sock.recv(8 - len(b))
            if not chunk:
                raise SystemExit("reducer gone")
            b += chunk
    return struct.unpack("<d", b)[0]


def fake_data_loader(step):
    # The bug: a rank-local data source that stops producing.
    if step == HANG_STEP and RANK == CULPRIT:
        while True:
            time.sleep(1)
    return float(step + RANK)


def main():
    # The agent's public tracing API: each step and its phases become rows
    # of python.trace_event, and set_step numbers the step every ring row
    # carries, as torch's optimizer hooks would (imported here, below the
    # frames the README quotes by line).
    from probing_mcp_agent import spans, steptiming

    if RANK == 0:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", PORT))
        ls.listen(WORLD)
        threading.Thread(target=serve_allreduce, args=(ls,), daemon=True, name="reducer").start()
    sock = connect()
    for step in range(1000000):
        steptiming.set_step(global_step=step)
        with spans.span("train_step", phase="step", step=step):
            with spans.span("load_batch", phase="data", step=step):
                batch = fake_data_loader(step)
            with spans.span("all_reduce", phase="comm", step=step):
                total = all_reduce(sock, batch)
        print("rank %d step %d sum %.1f" % (RANK, step, total), flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
