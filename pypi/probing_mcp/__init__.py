"""probing-mcp from PyPI: the Go binary (in bin/) and its launcher.

`probing-mcp` (the console script) and `python -m probing_mcp` run the
binary with the same arguments; `find_probing_mcp_bin()` gives its path.
The in-process agent ships beside this package as `probing_mcp_agent`.
"""

import os

from ._version import GLIBC_MIN, __version__

__all__ = ["__version__", "find_probing_mcp_bin", "glibc_problem"]


def find_probing_mcp_bin():
    """The absolute path of the probing-mcp binary this package carries."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "probing-mcp")
    if not os.path.isfile(path):
        raise FileNotFoundError(
            "%s is missing: this probing-mcp install is incomplete; reinstall it "
            "(pip install --force-reinstall probing-mcp)" % path
        )
    return path


def _glibc_version():
    """(major, minor) of the running C library, or None when it is not glibc."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"
    except (AttributeError, ValueError, OSError):
        return None
    if not text or not text.startswith("glibc "):
        return None
    try:
        major, minor = text.split()[1].split(".")[:2]
        return int(major), int(minor)
    except (IndexError, ValueError):
        return None


_DETECT = object()


def glibc_problem(have=_DETECT, need=None):
    """Why the binary cannot run on this C library, or "" when it can.

    A wheel tagged manylinux_2_17 needs glibc 2.17 or newer; pip checks
    that before it installs, but a copied venv or `--target` skips pip's
    check. A binary built here from the sdist needs nothing (GLIBC_MIN
    None). have is (major, minor), or None for a C library that is not
    glibc; by default the running one.
    """
    need = GLIBC_MIN if need is None else need
    if not need:
        return ""
    have = _glibc_version() if have is _DETECT else have
    want = "%d.%d" % tuple(need)
    fix = (
        "install from source instead (needs Go 1.26 and a C compiler): "
        "pip install --no-binary probing-mcp probing-mcp"
    )
    if have is None:
        return "probing-mcp's binary needs glibc %s or newer, and this system's C library is not glibc (musl?): %s" % (
            want,
            fix,
        )
    if tuple(have) < tuple(need):
        return "probing-mcp's binary needs glibc %s or newer; this system has glibc %d.%d: %s" % (
            want,
            have[0],
            have[1],
            fix,
        )
    return ""
