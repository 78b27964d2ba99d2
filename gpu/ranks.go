package gpu

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"

	"github.com/probing-mcp/probing-mcp/internal/procfacts"
)

// AttachRanks fills each process's rank from its environment
// (/proc/<pid>/environ under procRoot, procfacts.Proc when empty, read by
// procfacts.PlaceFromEnv). A process whose environment cannot be read
// keeps rank -1 and RankWhy says why.
func AttachRanks(snaps []Snapshot, procRoot string) {
	AttachRanksFrom(snaps, procRoot, "")
}

// AttachRanksFrom is AttachRanks that asks the agents first: the identity
// file an agent wrote in dataDir/<pid>/ (believed only when the process
// that owns the pid now wrote it: same start time, its owner's file),
// then the environment.
func AttachRanksFrom(snaps []Snapshot, procRoot, dataDir string) {
	if procRoot == "" {
		procRoot = procfacts.Proc
	}
	cache := map[uint32]Process{}
	for i := range snaps {
		for j := range snaps[i].Processes {
			p := &snaps[i].Processes[j]
			if c, ok := cache[p.PID]; ok {
				p.Rank, p.LocalRank, p.Role, p.RankWhy = c.Rank, c.LocalRank, c.Role, c.RankWhy
				continue
			}
			if !rankFromIdentity(p, procRoot, dataDir) {
				rankOf(p, procRoot)
			}
			cache[p.PID] = *p
		}
	}
}

func rankOf(p *Process, procRoot string) {
	p.Rank, p.LocalRank = -1, -1
	env, err := procfacts.EnvAt(procRoot, int(p.PID), procfacts.MaxEnvBytes)
	if err != nil && !errors.Is(err, procfacts.ErrTruncated) {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			p.RankWhy = fmt.Sprintf("pid %d is not in this PID namespace (another container or the host) or has exited", p.PID)
		default:
			p.RankWhy = err.Error()
		}
		return
	}
	pl := procfacts.PlaceFromEnv(env)
	p.Rank, p.LocalRank, p.Role = pl.Rank, pl.LocalRank, pl.Role
	if !pl.HasRank() {
		p.RankWhy = fmt.Sprintf("pid %d has no launcher rank variable (RANK, LOCAL_RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK…): not a rank of a job", p.PID)
	}
}

func rankFromIdentity(p *Process, procRoot, dataDir string) bool {
	if dataDir == "" {
		return false
	}
	pid := int(p.PID)
	id, fi, err := procfacts.ReadIdentity(filepath.Join(dataDir, strconv.Itoa(pid), procfacts.IdentityFile))
	if err != nil || id.PID != pid || id.Agent == procfacts.AgentNode {
		return false
	}
	st, err := procfacts.StatAt(procRoot, pid)
	if err != nil || st.Start != id.StartTime {
		return false // a reused pid, or a process gone
	}
	own, err := procfacts.ProcessOwner(pid)
	if err != nil || procfacts.CheckFile(fi, own) != nil {
		return false
	}
	p.Rank, p.LocalRank, p.Role = id.Rank, id.LocalRank, id.Role
	if p.Rank < 0 {
		p.RankWhy = fmt.Sprintf("pid %d's agent names no rank", pid)
	}
	return true
}
