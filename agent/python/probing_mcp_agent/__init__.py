"""probing-mcp's in-process agent for (distributed) PyTorch training.

Activated by the site hook (`probing_mcp_agent.pth` -> `_hook`) according to
the PROBING environment variable, or by hand:

    import probing_mcp_agent
    probing_mcp_agent.activate()

It serves agent/PROTOCOL.md on $PROBING_CTRL_ROOT/<pid>.sock and writes
<data dir>/<pid>/.identity.json. Importing this package does nothing else:
it must stay cheap, as the site hook imports it in every interpreter.
"""

__version__ = "0.2.0"


def activate():
    """Activates the agent in this process (idempotent). Returns True when
    it is active, False when it stood aside (the original Probing agent is
    active here) or could not start. Never raises."""
    from . import activation

    return activation.activate(mode="manual")


def record_collective(op, ranks, rank=None, nbytes=0):
    """Records one collective call of a job that does not use
    torch.distributed (its own sockets, MPI, a custom library) into
    python.comm_collective, as a with-block around the call::

        with probing_mcp_agent.record_collective("all_reduce", [0, 1, 2, 3]):
            my_all_reduce(buf)

    The server's diagnosis then sees who waits for whom. It does nothing
    when the agent is not active, and never raises."""
    from . import collectives

    return collectives.record(op, ranks, rank=rank, nbytes=nbytes)


def wait_ready(timeout=None):
    """Completes the agent's start-up in this process, or waits for the
    thread that does. The site hook leaves the config keys and the
    recorders to their first use (torch's import, a client, a span), so
    that it adds little to every interpreter's start. True when complete;
    False on timeout or when the agent is not active."""
    from . import activation, runtime

    if not runtime.started():
        return False
    activation.request_complete()
    activation.complete(timeout=timeout)
    return activation.ready_event.wait(timeout) and runtime.state.ready


def is_active():
    """True when the agent is active in this process."""
    from . import runtime

    return runtime.started()
