package procfacts

import (
	"sort"
	"strconv"
	"strings"
)

// Placement is where a launcher put a process in its job, as its
// environment says. Unknown numbers are -1.
type Placement struct {
	Rank, WorldSize, LocalRank, LocalWorldSize, NodeRank int
	// Role joins the parallel coordinates ("dp=2,pp=1,tp=0"), else it is
	// torchrun's ROLE_NAME, else "".
	Role string
}

// HasRank: a launcher gave the process a rank of its own (global or
// local). A process without one is no rank of a job: a launcher, a
// helper, or a program run alone.
func (p Placement) HasRank() bool { return p.Rank >= 0 || p.LocalRank >= 0 }

// The launchers' variables, first found wins for each field. MPI's come
// before Slurm's: under `srun mpirun …` SLURM_PROCID is the srun task, not
// the MPI rank. The same lists as our agent's identity.py, which writes
// them into the identity file; this is the reading for processes that
// have none (the original Probing agent, a dead agent's rings).
var (
	envRank           = []string{"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}
	envWorldSize      = []string{"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "SLURM_NPROCS"}
	envLocalRank      = []string{"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}
	envLocalWorldSize = []string{"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}
	envNodeRank       = []string{"GROUP_RANK", "NODE_RANK", "SLURM_NODEID"}
	// dimension → rank variables (PROBING_* win over Megatron's aliases).
	envParallel = map[string][]string{
		"tp": {"PROBING_TP_RANK", "TP_RANK", "TENSOR_MODEL_PARALLEL_RANK", "MEGATRON_TP_RANK"},
		"pp": {"PROBING_PP_RANK", "PP_RANK", "PIPELINE_MODEL_PARALLEL_RANK", "MEGATRON_PP_RANK"},
		"dp": {"PROBING_DP_RANK", "DP_RANK", "DATA_PARALLEL_RANK", "MEGATRON_DP_RANK"},
		"ep": {"PROBING_EP_RANK", "EP_RANK", "EXPERT_MODEL_PARALLEL_RANK", "EXPERT_PARALLEL_RANK"},
		"cp": {"PROBING_CP_RANK", "CP_RANK", "CONTEXT_PARALLEL_RANK"},
	}
)

// PlaceFromEnv reads a process's place in its job from its environment
// (torchrun, Slurm, OpenMPI/PMI variables; Probing's and Megatron's
// parallel coordinates for the role). A value that is not a plain number
// ("4(x2)" in SLURM_NTASKS_PER_NODE) does not count.
func PlaceFromEnv(env map[string]string) Placement {
	num := func(keys []string) int {
		for _, k := range keys {
			v, ok := env[k]
			if !ok {
				continue
			}
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return max(n, -1) // the first number wins, as in identity.py
			}
		}
		return -1
	}
	p := Placement{Rank: num(envRank), WorldSize: num(envWorldSize), LocalRank: num(envLocalRank),
		LocalWorldSize: num(envLocalWorldSize), NodeRank: num(envNodeRank)}
	parts := map[string]string{}
	for dim, keys := range envParallel {
		if r := num(keys); r >= 0 {
			parts[dim] = strconv.Itoa(r)
		}
	}
	for k, v := range env {
		if name, ok := strings.CutPrefix(k, "PROBING_ROLE_"); ok && name != "" {
			if v = strings.TrimSpace(v); v != "" {
				parts[strings.ToLower(name)] = v
			}
		}
	}
	if len(parts) > 0 {
		keys := make([]string, 0, len(parts))
		for k := range parts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			keys[i] = k + "=" + parts[k]
		}
		p.Role = strings.Join(keys, ",")
	} else {
		p.Role = strings.TrimSpace(env["ROLE_NAME"])
	}
	return p
}
