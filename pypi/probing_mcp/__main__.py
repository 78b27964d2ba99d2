"""`probing-mcp` and `python -m probing_mcp`: run the binary in this process.

The launcher execs the binary (same pid, stdin and signals: an MCP client
speaking over stdio talks to the binary itself). It tells the binary which
interpreter it came with, in PROBING_MCP_PYTHON, so that `probing-mcp agent
install` with no --python installs into this environment.
"""

import os
import sys

from . import find_probing_mcp_bin, glibc_problem


def main():
    why = glibc_problem()
    if why:
        sys.stderr.write("probing-mcp: %s\n" % why)
        return 1
    try:
        exe = find_probing_mcp_bin()
    except FileNotFoundError as e:
        sys.stderr.write("probing-mcp: %s\n" % e)
        return 1
    if not os.environ.get("PROBING_MCP_PYTHON") and sys.executable:
        os.environ["PROBING_MCP_PYTHON"] = sys.executable
    try:
        os.execv(exe, ["probing-mcp"] + sys.argv[1:])
    except OSError as e:
        # ENOEXEC: a wheel for another machine; EACCES: a noexec mount or
        # a lost executable bit.
        sys.stderr.write(
            "probing-mcp: cannot run %s: %s (reinstall with pip install --force-reinstall "
            "probing-mcp; on a noexec filesystem, install into a venv elsewhere)\n" % (exe, e)
        )
        return 1
    return 0  # not reached: execv replaced this process


if __name__ == "__main__":
    sys.exit(main())
