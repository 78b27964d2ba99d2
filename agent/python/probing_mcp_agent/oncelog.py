"""The recorders' logger, and warn_once: a warning once per kind.

The ring tables, the recorders and the post-import hooks log through the
"probing_mcp_agent" logger of the logging module (imported here: these
modules are loaded only by the start-up's background part, or by a test,
never by the site hook), each kind of failure once at warning level and
then at debug level, so that the agent cannot flood the job's log.

A leaf: it imports no module of the agent's.
"""

import logging

log = logging.getLogger("probing_mcp_agent")

_warned = set()


def warn_once(key, msg, *args):
    """Log a warning once per key (the agent must not flood the job's log)."""
    if key in _warned:
        log.debug(msg, *args)
        return
    _warned.add(key)
    try:
        log.warning(msg, *args)
    except Exception:
        pass
