package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/storage/fsinfo"
	"github.com/probing-mcp/probing-mcp/storage/memt"
)

// Ring is one MEMT table file found in the data dir.
type Ring struct {
	Schema, Table string // from the file name (see SplitName)
	Path          string
	PID           int // the pid directory it lies in
	Columns       []memt.Column
	TsCol         int // index+1 of the timestamp column, 0 if none
	// WriterAlive: the process that created the file (creator_pid and its
	// start time, from the header) still runs. A dead job's rings stay
	// readable until something deletes them.
	WriterAlive bool
	CreatorPID  int
	Counters    memt.Counters
	Geometry    memt.Geometry
	Dedup       bool
}

// Process is one pid directory: the rings one process wrote.
type Process struct {
	PID      int
	Dir      string
	Alive    bool // any of its rings' writers is alive
	Identity Identity
	Rings    []*Ring
}

// Identity places a process in the job. Unknown numbers are -1, as in
// Probing's federation tags; an empty Host means this node.
type Identity struct {
	Host      string `json:"host,omitempty"`
	Addr      string `json:"addr,omitempty"`
	Rank      int    `json:"rank"`
	NodeRank  int    `json:"node_rank"`
	LocalRank int    `json:"local_rank"`
	Role      string `json:"role,omitempty"`
}

// Problem is something in the data dir that could not be used, with why.
type Problem struct {
	Path    string `json:"path"`
	Problem string `json:"problem"`
}

// Inventory is what Discover found.
type Inventory struct {
	Base      string
	Processes []*Process
	Problems  []Problem
	// Missing: the data dir does not exist (nothing recorded yet).
	Missing bool
	// FS names the data dir's file system; NetworkFS is set for NFS,
	// Lustre and the like, where rings written on another host are not
	// coherent through mmap and may read stale.
	FS        string
	NetworkFS bool
}

// Rings lists every ring, by schema, table, then pid.
func (inv *Inventory) Rings() []*Ring {
	var out []*Ring
	for _, p := range inv.Processes {
		out = append(out, p.Rings...)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Schema != b.Schema {
			return a.Schema < b.Schema
		}
		if a.Table != b.Table {
			return a.Table < b.Table
		}
		return a.PID < b.PID
	})
	return out
}

// IdentityFile is the file, in a pid directory, where an agent may record
// its rank and role so that they stay known after the process died (a
// dead process has no /proc/<pid>/environ). Dot files are never tables.
const IdentityFile = ".identity.json"

// maxRingsPerDir bounds the work one hostile directory can cause.
const maxRingsPerDir = 4096

// Discover lists the data dir: one sub-directory per PID (other names are
// skipped: crash/, the server's own probing-mcp/), its MEMT files mapped
// to schema.table. Nothing is kept open. Files that are not MEMT tables
// (Probing's MEMH hash tables share the directories) are skipped silently;
// MEMT files that fail validation and unreadable directories become
// Problems, so a report can say what it could not read.
func Discover(base string) (*Inventory, error) {
	inv := &Inventory{Base: base}
	ents, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		inv.Missing = true
		return inv, nil
	}
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", base, err)
	}
	inv.FS, inv.NetworkFS, _ = fsinfo.NetworkFS(base)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || !e.IsDir() {
			continue
		}
		p := &Process{PID: pid, Dir: filepath.Join(base, e.Name())}
		if err := p.scan(inv); err != nil {
			inv.Problems = append(inv.Problems, Problem{p.Dir, err.Error()})
			continue
		}
		if len(p.Rings) == 0 {
			continue
		}
		p.Identity = readIdentity(p.Dir, pid)
		inv.Processes = append(inv.Processes, p)
	}
	sort.Slice(inv.Processes, func(i, j int) bool { return inv.Processes[i].PID < inv.Processes[j].PID })
	return inv, nil
}

// readDir is os.ReadDir; tests replace it to make a directory unreadable,
// which file modes cannot do for root.
var readDir = os.ReadDir

func (p *Process) scan(inv *Inventory) error {
	ents, err := readDir(p.Dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(p.Dir, name)
		schema, table, err := SplitName(name)
		if err != nil {
			if memt.IsMEMT(path) {
				inv.Problems = append(inv.Problems, Problem{path, err.Error()})
			}
			continue
		}
		if len(p.Rings) == maxRingsPerDir {
			inv.Problems = append(inv.Problems, Problem{p.Dir, fmt.Sprintf("more than %d tables; the rest skipped", maxRingsPerDir)})
			return nil
		}
		t, err := memt.Open(path)
		if err != nil {
			var fe *memt.FormatError
			if errors.As(err, &fe) && !memt.IsMEMT(path) {
				continue // not ours: MEMH hash tables and other files
			}
			inv.Problems = append(inv.Problems, Problem{path, err.Error()})
			continue
		}
		r := &Ring{Schema: schema, Table: table, Path: path, PID: p.PID, Columns: t.Columns, TsCol: t.TsCol,
			WriterAlive: t.WriterAlive(), CreatorPID: t.CreatorPID, Counters: t.Counters(),
			Geometry: t.Geometry, Dedup: t.Dedup}
		t.Close()
		p.Alive = p.Alive || r.WriterAlive
		p.Rings = append(p.Rings, r)
	}
	return nil
}

// SplitName maps a ring file name to schema and table as Probing does:
// split at the first dot (python.torch_trace → python, torch_trace;
// foo.bar.baz → foo, bar.baz); no dot → memtable.<name>. The schema must
// be [A-Za-z0-9_]+ and the table [A-Za-z0-9_.]+.
func SplitName(name string) (schema, table string, err error) {
	schema, table, ok := strings.Cut(name, ".")
	if !ok {
		schema, table = "memtable", name
	}
	if schema == "" || !validIdent(schema, false) {
		return "", "", fmt.Errorf("file name %q: schema %q is not [A-Za-z0-9_]+", name, schema)
	}
	if table == "" || !validIdent(table, true) {
		return "", "", fmt.Errorf("file name %q: table %q is not [A-Za-z0-9_.]+", name, table)
	}
	return schema, table, nil
}

func validIdent(s string, dots bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (dots && c == '.')
		if !ok {
			return false
		}
	}
	return true
}

// readIdentity takes the agent's identity file when there is one (it
// survives the process), else the launcher's variables from
// /proc/<pid>/environ (torchrun's RANK, LOCAL_RANK, GROUP_RANK, ROLE_NAME),
// else -1s.
func readIdentity(dir string, pid int) Identity {
	id := Identity{Rank: -1, NodeRank: -1, LocalRank: -1}
	if b, err := readSmall(filepath.Join(dir, IdentityFile), 64<<10); err == nil {
		f := id
		if json.Unmarshal(b, &f) == nil {
			return f
		}
	}
	b, err := readSmall(fmt.Sprintf("/proc/%d/environ", pid), 1<<20)
	if err != nil {
		return id
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if _, dup := env[k]; !dup { // getenv and os.environ take the first
				env[k] = v
			}
		}
	}
	num := func(keys ...string) int {
		for _, k := range keys {
			if n, err := strconv.Atoi(env[k]); err == nil {
				return n
			}
		}
		return -1
	}
	id.Rank = num("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
	id.LocalRank = num("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
	id.NodeRank = num("GROUP_RANK", "NODE_RANK", "SLURM_NODEID")
	id.Role = env["ROLE_NAME"]
	return id
}

func readSmall(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	return b, nil
}
