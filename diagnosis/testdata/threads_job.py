"""One rank of a small torch-free job that hangs in a chosen way (stdlib only).

The ranks synchronise every step through an all-reduce over TCP (rank 0
hosts it), recorded with record_collective like a torch collective. At step
HANG_STEP the culprit (the last rank) does what SCENARIO says:

  deadlock         its main thread and a helper thread take two Locks in
                   opposite orders (update_stats / flush_log)
  deadlock_rlock   the same with RLocks, whose owners the agent can read
  gil_held         a C call that keeps the GIL: libc sleep() through
                   ctypes.PyDLL, in a loop (native_wait)
  gil_held_thread  the same in a helper thread the main thread joins
  main_thread_dead its main thread dies of an exception (load_batch) while a
                   non-daemon thread (heartbeat) keeps the process alive
  mismatch         it calls a broadcast where the others call all_reduce
                   (broadcast_params), and waits in it
  dead_rank        it raises (train_step) and dies; the reducer then closes
                   every connection and the others die of that, later
  loader_worker    it waits for a batch from its worker process (fork), which
                   blocks opening its shard, a FIFO nobody writes (read_sample)
  spawn_worker     the same with a spawned worker (under PROBING=2 it runs
                   the agent too)
  torch_loader     the same through torch's DataLoader, two workers (fork)
  upload_stuck     it waits for its upload command, which never returns
                   (upload_checkpoint: subprocess.run of a sleep)
  fifo_read        its main thread opens the FIFO itself (read_sample)

The peers wait in their all-reduce (or die, for dead_rank). Environment:
RANK, WORLD_SIZE, MASTER_PORT, SCENARIO, and the agent's (PROBING=1,
PROBING_DATA_DIR, PROBING_CTRL_ROOT, PYTHONPATH with probing_mcp_agent).
"""
import ctypes
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import probing_mcp_agent
import probing_mcp_agent._hook  # noqa: F401  (activation, as the .pth does)

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
PORT = int(os.environ["MASTER_PORT"])
SCENARIO = os.environ["SCENARIO"]
HANG_STEP = 3
CULPRIT = WORLD - 1
SHARD = os.path.abspath("shard-%d.fifo" % RANK)  # the job runs in its own dir


def serve_allreduce(listener):
    """Rank 0's reducer: one float per rank per step, the sum sent back.
    A rank that goes away ends the job: every connection is closed."""
    conns = [listener.accept()[0] for _ in range(WORLD)]
    try:
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
    finally:
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()


def connect():
    for _ in range(400):
        try:
            return socket.create_connection(("127.0.0.1", PORT))
        except OSError:
            time.sleep(0.05)
    raise SystemExit("rank %d: cannot reach the reducer" % RANK)


def recv8(sock):
    b = b""
    while len(b) < 8:
        chunk = sock.recv(8 - len(b))
        if not chunk:
            raise ConnectionError("rank %d: the reducer closed the connection (a peer is gone)" % RANK)
        b += chunk
    return b


def all_reduce(sock, value):
    with probing_mcp_agent.record_collective("all_reduce", range(WORLD), rank=RANK, nbytes=8):
        sock.sendall(struct.pack("<d", value))
        return struct.unpack("<d", recv8(sock))[0]


def broadcast_params(sock):
    # The bug: this rank's code path calls another collective than its
    # peers at the same point; it waits for data that never comes.
    with probing_mcp_agent.record_collective("broadcast", range(WORLD), rank=RANK, nbytes=64):
        return sock.recv(64)


def update_stats(lock_type):
    stats_lock, log_lock = lock_type(), lock_type()
    both = threading.Barrier(2)

    def flush_log():
        with log_lock:
            both.wait()
            with stats_lock:
                pass

    threading.Thread(target=flush_log, name="log-flusher", daemon=True).start()
    with stats_lock:
        both.wait()
        with log_lock:
            pass


def native_wait():
    # libc's sleep through PyDLL: a C call made with the GIL held. A
    # signal (the stack dump's) cuts a sleep short, hence the loop.
    libc = ctypes.PyDLL(None)
    while True:
        libc.sleep(100000)


def heartbeat():
    while True:
        time.sleep(0.2)


def load_batch(step):
    threading.Thread(target=heartbeat, name="heartbeat").start()  # not a daemon
    raise ValueError("corrupt record in shard 7 at step %d" % step)


def train_step(step):
    raise RuntimeError("simulated device failure at step %d" % step)


def read_sample(path):
    with open(path, "rb") as f:  # a FIFO nobody writes: open waits for a writer
        return f.read()


def loader_worker(q, path):
    q.put(read_sample(path))


def next_batch(method):
    import multiprocessing

    ctx = multiprocessing.get_context(method)
    q = ctx.Queue()
    ctx.Process(target=loader_worker, args=(q, SHARD), name="loader-worker", daemon=True).start()
    return q.get()


def torch_batch():
    from torch.utils.data import DataLoader, Dataset

    class Shard(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return len(read_sample(SHARD))

    for batch in DataLoader(Shard(), batch_size=1, num_workers=2):
        return batch


def upload_checkpoint():
    subprocess.run(["sleep", "3600"], check=True)


def culprit_acts(sock, step):
    if SCENARIO in ("loader_worker", "spawn_worker", "torch_loader", "fifo_read"):
        os.mkfifo(SHARD)
    if SCENARIO == "loader_worker":
        next_batch("fork")
    elif SCENARIO == "spawn_worker":
        next_batch("spawn")
    elif SCENARIO == "torch_loader":
        torch_batch()
    elif SCENARIO == "fifo_read":
        read_sample(SHARD)
    elif SCENARIO == "upload_stuck":
        upload_checkpoint()
    elif SCENARIO == "deadlock":
        update_stats(threading.Lock)
    elif SCENARIO == "deadlock_rlock":
        update_stats(threading.RLock)
    elif SCENARIO == "gil_held":
        native_wait()
    elif SCENARIO == "gil_held_thread":
        w = threading.Thread(target=native_wait, name="native-worker", daemon=True)
        w.start()
        w.join()
    elif SCENARIO == "main_thread_dead":
        load_batch(step)
    elif SCENARIO == "mismatch":
        broadcast_params(sock)
    elif SCENARIO == "dead_rank":
        train_step(step)
    else:
        raise SystemExit("unknown SCENARIO %r" % SCENARIO)


def main():
    if RANK == 0:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", PORT))
        ls.listen(WORLD)
        threading.Thread(target=serve_allreduce, args=(ls,), daemon=True, name="reducer").start()
    sock = connect()
    for step in range(1000000):
        if step == HANG_STEP and RANK == CULPRIT:
            print("rank %d acts: %s" % (RANK, SCENARIO), flush=True)
            culprit_acts(sock, step)
        total = all_reduce(sock, float(step + RANK))
        print("rank %d step %d sum %.1f" % (RANK, step, total), flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
