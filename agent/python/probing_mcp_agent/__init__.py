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


def is_active():
    """True when the agent is active in this process."""
    from . import runtime

    return runtime.started()
