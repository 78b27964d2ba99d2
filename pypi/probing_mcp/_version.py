# Every wheel replaces this file (pypi/probing_mcp_build.py writes it from
# VERSION and the glibc the binary was built for); this copy serves tests.
__version__ = "0.0.0+source"
# The oldest glibc the binary runs on; None for a binary built on this machine.
GLIBC_MIN = None
