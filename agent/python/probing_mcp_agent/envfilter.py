"""Which environment variables the agent reports, and which names are secret.

`/apis/overview` (on every transport) reports the process environment so a
diagnosis can see how the launcher placed the rank. It reports an
allow-list only: launcher and framework variables (torchrun/elastic, Slurm,
Open MPI, PMI, CUDA device selection, NCCL/Gloo/torch distributed knobs,
thread counts, non-secret PROBING_*). Everything else (DATABASE_URL,
HF_HOME, credentials of any kind) stays out, because a name alone cannot
tell a secret from a setting. A name on the allow-list that contains a
secret word (TOKEN, SECRET, KEY, ...) is withheld too: NCCL_* or PROBING_*
does not make a value safe. The reply says how many variables were
withheld, never which.

secret(name) is also what keeps PROBING_* secrets out of the config store
(config.env_key), so the two reports cannot disagree.
"""

# Substrings of an upper-cased name that mark it as (possibly) secret. A
# substring, not a whole word: OPENAI_APIKEY and WANDB_KEY are both caught,
# at the price of withholding the odd *_PATH (PAT) knob, which the count shows.
SECRET_WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "PASS", "CREDENTIAL", "AUTH", "PAT", "PEM",
                "COOKIE", "SESSION", "PRIVATE", "CERT")

# Exact names a diagnosis uses.
ALLOWED_NAMES = frozenset([
    # torchrun / torch.distributed.elastic
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
    # Megatron-style parallel coordinates (identity.py reads them)
    "TP_RANK", "PP_RANK", "DP_RANK", "EP_RANK", "CP_RANK", "TP_SIZE", "PP_SIZE", "DP_SIZE", "EP_SIZE", "CP_SIZE",
    "TENSOR_MODEL_PARALLEL_RANK", "TENSOR_MODEL_PARALLEL_SIZE", "PIPELINE_MODEL_PARALLEL_RANK",
    "PIPELINE_MODEL_PARALLEL_SIZE", "DATA_PARALLEL_RANK", "DATA_PARALLEL_SIZE", "EXPERT_MODEL_PARALLEL_RANK",
    "EXPERT_MODEL_PARALLEL_SIZE", "EXPERT_PARALLEL_RANK", "EXPERT_PARALLEL_SIZE", "CONTEXT_PARALLEL_RANK",
    "CONTEXT_PARALLEL_SIZE", "MEGATRON_TP_RANK", "MEGATRON_TP_SIZE", "MEGATRON_PP_RANK", "MEGATRON_PP_SIZE",
    "MEGATRON_DP_RANK", "MEGATRON_DP_SIZE",
    # MPICH / Intel MPI local ranks
    "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    # Slurm: job, step and rank ids, the node list
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE",
    "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_STEP_NODELIST",
    "SLURMD_NODENAME", "SLURM_CPUS_PER_TASK", "SLURM_GPUS_ON_NODE", "SLURM_RESTART_COUNT", "SLURM_JOB_PARTITION",
    # devices and threads
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_MAX_CONNECTIONS",
    "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    # torch logging that changes what a hang leaves behind
    "TORCH_CPP_LOG_LEVEL", "TORCH_SHOW_CPP_STACKTRACES", "TORCH_LOGS", "TORCH_DISTRIBUTED_DEBUG",
    "PYTHONFAULTHANDLER", "PYTHONUNBUFFERED",
])

# Prefixes of launcher and framework families.
ALLOWED_PREFIXES = ("TORCHELASTIC_", "OMPI_COMM_WORLD_", "PMI_", "PMIX_RANK", "NCCL_", "GLOO_",
                    "TORCH_NCCL_", "TORCH_FR_", "TORCH_DISTRIBUTED_", "TORCH_GLOO_", "PROBING_")


def secret(name):
    """True when name (any case) contains a secret word."""
    u = name.upper()
    for w in SECRET_WORDS:
        if w in u:
            return True
    return False


def allowed(name):
    """True when the agent may report name: allow-listed and not secret."""
    if name not in ALLOWED_NAMES and not name.startswith(ALLOWED_PREFIXES):
        return False
    return not secret(name)


def report(environ):
    """(reported {name: value}, withheld count) of an environment mapping."""
    out = {}
    withheld = 0
    for k, v in environ.items():
        if allowed(k):
            out[k] = v
        else:
            withheld += 1
    return out, withheld
