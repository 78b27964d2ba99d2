"""Who this process is in the job: ranks from the launcher, role, start time.

Sources, first found wins for each field:
  rank        RANK (torchrun), OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID
  world_size  WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS, SLURM_NPROCS
  local_rank  LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID
  local_world_size  LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS,
              SLURM_NTASKS_PER_NODE (a plain number only)
  node_rank   GROUP_RANK (torchrun), NODE_RANK, SLURM_NODEID
MPI variables come before Slurm's: under `srun mpirun ...` SLURM_PROCID is
the srun task, not the MPI rank.

The role string joins the parallel coordinates, sorted by name:
"dp=2,pp=1,tp=0". PROBING_{TP,PP,DP,EP,CP}_RANK win over the Megatron-style
aliases (TP_RANK, TENSOR_MODEL_PARALLEL_RANK, ...); PROBING_ROLE_<NAME>=v
adds "<name>=v". Without any of them the role is torchrun's ROLE_NAME (as
the Go side does when it reads /proc/<pid>/environ).
"""
import os
import sys
import threading

from . import runtime

_RANK = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
_WORLD = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "SLURM_NPROCS")
_LOCAL_RANK = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
_LOCAL_WORLD = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE")
_NODE_RANK = ("GROUP_RANK", "NODE_RANK", "SLURM_NODEID")

# dimension -> (rank variables, size variables), first found wins.
_PARALLEL = {
    "tp": (("PROBING_TP_RANK", "TP_RANK", "TENSOR_MODEL_PARALLEL_RANK", "MEGATRON_TP_RANK"),
           ("PROBING_TP_SIZE", "TP_SIZE", "TENSOR_MODEL_PARALLEL_SIZE", "MEGATRON_TP_SIZE")),
    "pp": (("PROBING_PP_RANK", "PP_RANK", "PIPELINE_MODEL_PARALLEL_RANK", "MEGATRON_PP_RANK"),
           ("PROBING_PP_SIZE", "PP_SIZE", "PIPELINE_MODEL_PARALLEL_SIZE", "MEGATRON_PP_SIZE")),
    "dp": (("PROBING_DP_RANK", "DP_RANK", "DATA_PARALLEL_RANK", "MEGATRON_DP_RANK"),
           ("PROBING_DP_SIZE", "DP_SIZE", "DATA_PARALLEL_SIZE", "MEGATRON_DP_SIZE")),
    "ep": (("PROBING_EP_RANK", "EP_RANK", "EXPERT_MODEL_PARALLEL_RANK", "EXPERT_PARALLEL_RANK"),
           ("PROBING_EP_SIZE", "EP_SIZE", "EXPERT_MODEL_PARALLEL_SIZE", "EXPERT_PARALLEL_SIZE")),
    "cp": (("PROBING_CP_RANK", "CP_RANK", "CONTEXT_PARALLEL_RANK"),
           ("PROBING_CP_SIZE", "CP_SIZE", "CONTEXT_PARALLEL_SIZE")),
}


def _int(environ, keys):
    for k in keys:
        v = environ.get(k)
        if v is None:
            continue
        try:
            return int(v.strip())
        except (ValueError, AttributeError):
            continue
    return -1


def parallel(environ=None):
    """{"tp": {"rank": 0, "size": 8}, ...} for the dimensions that are set."""
    env = os.environ if environ is None else environ
    out = {}
    for dim, (rk, sz) in _PARALLEL.items():
        r, s = _int(env, rk), _int(env, sz)
        if r >= 0 or s >= 0:
            out[dim] = {"rank": r, "size": s}
    return out


def role(environ=None):
    """"dp=2,pp=1,tp=0" (sorted), or ROLE_NAME, or ""."""
    env = os.environ if environ is None else environ
    parts = {}
    for dim, coord in parallel(env).items():
        if coord["rank"] >= 0:
            parts[dim] = str(coord["rank"])
    for k, v in env.items():
        if k.startswith("PROBING_ROLE_") and len(k) > len("PROBING_ROLE_") and v is not None:
            v = v.strip()
            if v:
                parts[k[len("PROBING_ROLE_"):].lower()] = v
    if parts:
        return ",".join("%s=%s" % (k, parts[k]) for k in sorted(parts))
    return (env.get("ROLE_NAME") or "").strip()


def start_time(pid=None):
    """Field 22 of /proc/<pid>/stat (clock ticks since boot), 0 if unknown."""
    try:
        with open("/proc/%s/stat" % (pid or "self"), "rb") as f:
            data = f.read()
        # comm (field 2) may hold spaces and parentheses: split after the last ')'.
        rest = data[data.rindex(b")") + 2:].split()
        return int(rest[19])  # fields 3.. -> index 0 is field 3
    except Exception:
        return 0


def torch_version():
    t = sys.modules.get("torch")
    if t is None:
        return ""
    try:
        return str(getattr(t, "__version__", "") or "")
    except Exception:
        return ""


def _argv():
    try:
        return [str(a) for a in sys.argv]
    except Exception:
        return []


def build(environ=None):
    """The identity object of agent/PROTOCOL.md from the environment and
    the runtime state (socket, signal, ...). Unknown numbers are -1."""
    env = os.environ if environ is None else environ
    st = runtime.state
    try:
        host = os.uname().nodename  # gethostname(), without importing socket
    except Exception:
        host = ""
    ident = {
        "agent": runtime.AGENT_NAME,
        "agent_version": runtime.AGENT_VERSION,
        "pid": os.getpid(),
        "start_time": start_time(),
        "host": host,
        "rank": _int(env, _RANK),
        "world_size": _int(env, _WORLD),
        "local_rank": _int(env, _LOCAL_RANK),
        "local_world_size": _int(env, _LOCAL_WORLD),
        "node_rank": _int(env, _NODE_RANK),
        "role": role(env),
        "addr": st.tcp_address or "",
        "socket": st.socket_path or "",
        "faulthandler_signal": st.stack_signal if st.stack_signal else -1,
        "faulthandler_file": st.stack_file or "",
        # eval is served on the control socket (not opted out); the Go
        # side checks it before calling. eval_tcp (ext): over TCP too.
        "eval_allowed": bool(st.eval_allowed),
        "eval_tcp": bool(st.eval_tcp),
        "python": "%d.%d.%d" % tuple(sys.version_info[:3]),
        "torch": torch_version(),
        "argv": _argv(),
        # extensions (the Go side ignores unknown fields)
        "role_name": (env.get("ROLE_NAME") or "").strip(),
        "parallel": parallel(env),
        "crash_file": st.crash_file or "",
        "rank_source": "env" if _int(env, _RANK) >= 0 else "",
        # Where torch writes Flight Recorder dumps and, for NCCL, the FIFO
        # that triggers one without the GIL (<prefix><rank>.pipe): the Go
        # side uses them when the agent cannot answer.
        "fr_dump_prefix": (env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") or "").strip(),
        "fr_pipe_prefix": (env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE") or "").strip(),
        # torchrun's per-rank error file: @record writes the exception
        # that ends the rank there. Recorded now because a dead process's
        # environ is gone; the Go side reads it as the job's (hostile) file.
        "torchelastic_error_file": (env.get("TORCHELASTIC_ERROR_FILE") or "").strip(),
    }
    return ident


# ---- the process's identity object ----------------------------------------
# Kept in runtime.state.identity (reset in a forked child), written to
# <data dir>/<pid>/.identity.json.


def current():
    """The identity object (agent/PROTOCOL.md), a copy. Before activation it
    is built from the environment, without writing anything."""
    st = runtime.state
    with st.lock:
        cur = st.identity
        if cur is not None and cur.get("pid") == os.getpid():
            return dict(cur)
    # Built outside the lock (the lock guards the state, not the build).
    built = build()
    with st.lock:
        if st.identity is None or st.identity.get("pid") != os.getpid():
            st.identity = built
        return dict(st.identity)


def update_identity(**fields):
    """Merges fields into the identity and rewrites .identity.json atomically
    (tmp file + rename). Returns the new identity (a copy)."""
    st = runtime.state
    base = current()  # before the lock (see current())
    with st.lock:
        cur = st.identity
        ident = dict(cur) if cur is not None and cur.get("pid") == os.getpid() else base
        ident.update(fields)
        st.identity = ident
        try:
            write_identity(ident)
        except Exception as e:
            runtime.logger.warning("cannot write %s: %s", runtime.IDENTITY_FILE, e)
        return dict(ident)


def write_identity(ident=None):
    with runtime.state.lock:
        if ident is None:
            ident = current()
        d = runtime.pid_dir()
        path = os.path.join(d, runtime.IDENTITY_FILE)
        tmp = "%s.tmp.%d.%d" % (path, os.getpid(), threading.get_ident())
        data = runtime.dumps(ident)
        # 0o644 whatever the umask: the server believes an identity file
        # only when no one but its owner can have written it.
        with runtime.open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) as f:
            f.write(data)
            f.write("\n")
        os.replace(tmp, path)
        return path


def identity_path():
    return os.path.join(runtime.data_dir(), str(os.getpid()), runtime.IDENTITY_FILE)


# ---- torch.distributed watcher -------------------------------------------

_POLL_S = 2.0
_MAX_S = 3600.0


def _megatron_role():
    ps = sys.modules.get("megatron.core.parallel_state") or sys.modules.get("megatron.mpu")
    if ps is None:
        return None
    try:
        if not ps.model_parallel_is_initialized():
            return None
        parts = {
            "tp": ps.get_tensor_model_parallel_rank(),
            "pp": ps.get_pipeline_model_parallel_rank(),
            "dp": ps.get_data_parallel_rank(),
        }
        return ",".join("%s=%d" % (k, int(parts[k])) for k in sorted(parts))
    except Exception:
        return None


def poll_once(state_box):
    """One cheap look at torch / torch.distributed / Megatron. Returns True
    when there is nothing more to learn. state_box carries what was seen."""
    changes = {}
    cur = current()
    tv = torch_version()
    if tv and cur.get("torch") != tv:
        changes["torch"] = tv
    argv = _argv()
    if argv and argv != cur.get("argv"):
        changes["argv"] = argv
    done = False
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                r, w = int(dist.get_rank()), int(dist.get_world_size())
                if r != cur.get("rank") or w != cur.get("world_size"):
                    changes["rank"], changes["world_size"] = r, w
                if cur.get("rank_source") != "torch.distributed":
                    changes["rank_source"] = "torch.distributed"
                done = True
        except Exception:
            pass
    if done and not (env_role_set() or cur.get("role", "").count("=")):
        mr = _megatron_role()
        if mr is None and ("megatron.core.parallel_state" in sys.modules or "megatron.mpu" in sys.modules):
            done = False  # Megatron is here but has not set up its groups yet
        elif mr and mr != cur.get("role"):
            changes["role"] = mr
    if not state_box.get("warned_original"):
        if sys.modules.get("probing") is not None and "probing._core" in sys.modules:
            state_box["warned_original"] = True
            runtime.logger.warning(
                "the original Probing agent is also active in this process; both agents now run "
                "(set PROBING for one of them only)")
    if changes:
        update_identity(**changes)
    return done


def env_role_set():
    return any(c["rank"] >= 0 for c in parallel().values()) or any(
        k.startswith("PROBING_ROLE_") for k in os.environ)


def watch(poll_s=_POLL_S, max_s=_MAX_S):
    """Daemon-thread body: fills rank/world_size from torch.distributed once
    it is initialised (and torch's version, argv after runpy, Megatron's
    role). Stops after success or after max_s."""
    import time

    box = {}
    t0 = time.monotonic()
    while runtime.started() and time.monotonic() - t0 < max_s:
        time.sleep(poll_s)
        try:
            if poll_once(box):
                return
        except Exception as e:
            runtime.logger.debug("identity watcher: %s", e)
