"""The Flight Recorder environment (fr.py's configure_env(), see its doc).

A module of its own because activation calls it in every activated
interpreter, before torch is imported: it must import nothing heavy (fr.py
imports pickle, json, base64 and the tables).
"""
import os
import sys

from . import runtime

log = runtime.logger

FR_BUFFER_DEFAULT = "2000"
ENV_SET = {}          # variables configure_env() set, name -> value



def configure_env(environ=None):
    """Set the FR variables that are unset (see the module doc). Returns
    {name: value} of what it set."""
    env = os.environ if environ is None else environ
    out = {}
    try:
        _drop_inherited(env)
        new, old = _names()
        if not env.get("TORCH_FR_BUFFER_SIZE") and not env.get("TORCH_NCCL_TRACE_BUFFER_SIZE"):
            if new:
                out["TORCH_FR_BUFFER_SIZE"] = FR_BUFFER_DEFAULT
            if old:
                out["TORCH_NCCL_TRACE_BUFFER_SIZE"] = FR_BUFFER_DEFAULT
        d = None
        try:
            from . import runtime

            d = runtime.pid_dir()
        except Exception as e:
            log.debug("fr: no pid dir for dump files: %s", e)
        if d:
            if not env.get("TORCH_FR_DUMP_TEMP_FILE") and not env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
                if new:
                    out["TORCH_FR_DUMP_TEMP_FILE"] = os.path.join(d, "fr_dump_rank_")
                if old:
                    out["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = os.path.join(d, "fr_dump_rank_")
            if not env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"):
                out["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] = os.path.join(d, "fr_pipe_")
        for k, v in out.items():
            env[k] = v
        ENV_SET.update(out)
        mine = sorted(k for k in out if k in _PATH_VARS)
        if mine:
            env[DEFAULTS_VAR] = "%d:%s" % (os.getpid(), ",".join(mine))
        elif DEFAULTS_VAR in env:
            del env[DEFAULTS_VAR]  # what it named is gone or was the user's
        if out and _dist_initialized():
            log.warning("Flight Recorder variables set after init_process_group (%s): they take effect "
                        "only for process groups created later", ", ".join(sorted(out)))
    except Exception as e:
        log.warning("fr: configure_env failed: %s", e)
    return out


DEFAULTS_VAR = "PROBING_MCP_FR_DEFAULTS"
# variable -> the file name configure_env() gives it under its pid dir
_PATH_VARS = {"TORCH_FR_DUMP_TEMP_FILE": "fr_dump_rank_", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "fr_dump_rank_",
              "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "fr_pipe_"}


def _drop_inherited(env):
    """Unsets the dump and pipe prefixes that another process's agent set
    and this one inherited (PROBING=2: the launcher's agent exports them,
    every rank would dump into the launcher's pid dir and race on one
    pipe). DEFAULTS_VAR="<pid>:<names>" says which the agent set; a name
    counts as that agent's only while its value is still the agent's
    default for that pid (<...>/<pid>/fr_dump_rank_, .../fr_pipe_), so a
    value the user set, or changed since, is kept. Returns the names it
    unset."""
    raw = (env.get(DEFAULTS_VAR) or "").strip()
    if not raw:
        return []
    pid, _, names = raw.partition(":")
    if pid.strip() == str(os.getpid()):
        return []
    dropped = []
    for name in names.split(","):
        name = name.strip()
        base = _PATH_VARS.get(name)
        v = env.get(name) or ""
        if base and v and os.path.basename(v) == base and os.path.basename(os.path.dirname(v)) == pid.strip():
            del env[name]
            dropped.append(name)
    del env[DEFAULTS_VAR]
    return dropped


def torch_version_on_disk():
    """(major, minor) of the torch that ``import torch`` would load, read
    from torch/version.py without importing torch; None if unknown."""
    t = sys.modules.get("torch")
    v = getattr(t, "__version__", None) if t is not None else None
    if v is None:
        try:
            spec = _find_spec("torch")
            if spec is None or not spec.origin:
                return None
            with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
                for line in f:
                    if line.startswith("__version__"):
                        v = line.split("=", 1)[1].strip().strip("'\"")
                        break
        except Exception:
            return None
    try:
        parts = str(v).split(".")
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except Exception:
        return None


def _names():
    """Which FR variable names to set: (TORCH_FR_*, TORCH_NCCL_*). torch
    >= 2.8 reads TORCH_FR_* first and warns that the TORCH_NCCL_* aliases
    are deprecated, older torch knows only TORCH_NCCL_*; when the version
    cannot be read, both are set."""
    v = torch_version_on_disk()
    if v is None:
        return True, True
    return (True, False) if v >= (2, 8) else (False, True)


def _dist_initialized():
    d = sys.modules.get("torch.distributed")
    try:
        return bool(d is not None and d.is_available() and d.is_initialized())
    except Exception:
        return False




def _find_spec(name):
    """importlib.util.find_spec for a top-level name, without importing
    importlib.util: the finders of sys.meta_path in turn (so an editable
    install's finder counts too)."""
    for finder in list(sys.meta_path):
        fs = getattr(finder, "find_spec", None)
        if fs is None:
            continue
        spec = fs(name, None)
        if spec is not None:
            return spec
    return None
