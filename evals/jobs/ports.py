"""A port for a job's TCPStore on a busy machine (the corpus' launchers)."""
import random
import socket


def store_port():
    """A port for the job's TCPStore, below the kernel's ephemeral range:
    a port the kernel handed out and this process released can go to any
    connecting socket (gloo's own, another job's) before rank 0 binds it
    (EADDRINUSE on a busy machine). Below the range only a listener can
    take it, and one chosen at random rarely is."""
    lo = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    for _ in range(200):
        port = random.randrange(10000, max(lo, 10001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
