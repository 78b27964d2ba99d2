package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/procfacts"
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

// Process is one trusted pid directory with rings: the rings one process
// wrote.
type Process struct {
	PID      int
	Dir      string
	Alive    bool // any of its rings' writers is alive
	Identity Identity
	Rings    []*Ring
	// UID owns the directory and every file read from it.
	UID int
}

// PidDir is one pid directory of the data dir, trusted or not.
type PidDir struct {
	PID int
	Dir string
	// Owner is whose files may speak for the process: its effective user
	// while it runs, else the directory's owner.
	Owner procfacts.Owner
	// Identity is our agent's identity file, when there is a trusted one
	// that names this pid.
	Identity *procfacts.Identity
	// Untrusted says why nothing in the directory may speak for the
	// process (another user's files, writable by others, another user's
	// job); "" when it may. An untrusted directory's rings are not read
	// and its identity is not believed.
	Untrusted string
	// Rings counts the ring tables read from it.
	Rings int
	// Start is the process's start time as its identity file or its own
	// rings recorded it (0: none), so that a reused pid is not taken for it.
	Start uint64
	// Ending is what the agent recorded about how the process ended (its
	// uncaught exceptions, the main thread's end, the exit), when anything.
	Ending *procfacts.Ending
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
	// Dirs is every pid directory, by pid, with what may be believed of
	// it; Processes holds the trusted ones that have rings.
	Dirs []*PidDir
	// Served is whose processes count (see procfacts.Scope).
	Served procfacts.Served
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
const IdentityFile = procfacts.IdentityFile

// maxRingsPerDir bounds the work one hostile directory can cause.
const maxRingsPerDir = 4096

// Discover lists the data dir: one sub-directory per PID (other names are
// skipped: crash/, the server's own probing-mcp/), its MEMT files mapped
// to schema.table. Nothing is kept open. Files that are not MEMT tables
// (Probing's MEMH hash tables share the directories) are skipped silently;
// MEMT files that fail validation and unreadable directories become
// Problems, so a report can say what it could not read.
//
// The data dir is usually shared by every user of the node (1777), so a
// directory counts only when it and every file read from it belong to
// the owner of the process it names and nobody else can write them
// (procfacts.CheckFile), and when that owner is one the server serves
// (procfacts.Scope, from PROBING_MCP_JOB_USER). Other directories are
// kept in Dirs as untrusted, with the reason, and reported as Problems;
// their rings are never read.
func Discover(base string) (*Inventory, error) {
	scope, err := procfacts.DefaultScope()
	if err != nil {
		return nil, err
	}
	return DiscoverScope(base, scope)
}

// DiscoverScope is Discover serving scope.
func DiscoverScope(base string, scope procfacts.Scope) (*Inventory, error) {
	inv := &Inventory{Base: base}
	ents, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		inv.Missing = true
		inv.Served = scope.Resolve(nil)
		return inv, nil
	}
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", base, err)
	}
	inv.FS, inv.NetworkFS, _ = fsinfo.NetworkFS(base)
	var procs []*Process
	present := map[int]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || strconv.Itoa(pid) != e.Name() {
			continue
		}
		d := &PidDir{PID: pid, Dir: filepath.Join(base, e.Name()), Owner: procfacts.Owner{UID: -1, GID: -1}}
		inv.Dirs = append(inv.Dirs, d)
		p, err := d.scan(inv)
		if err != nil {
			inv.Problems = append(inv.Problems, Problem{d.Dir, err.Error()})
			if d.Untrusted == "" {
				d.Untrusted = err.Error()
			}
			continue
		}
		if d.Untrusted != "" {
			continue
		}
		present[d.Owner.UID]++
		if p != nil {
			procs = append(procs, p)
		}
	}
	// Whose job this is can only be decided once every directory is seen.
	inv.Served = scope.Resolve(present)
	for _, d := range inv.Dirs {
		if d.Untrusted == "" && !inv.Served.Has(d.Owner.UID) {
			d.Untrusted = inv.Served.Why(d.Owner.UID, scope.Self)
			inv.Problems = append(inv.Problems, Problem{d.Dir, "untrusted, not read: " + d.Untrusted})
		}
	}
	for _, p := range procs {
		if inv.Served.Has(p.UID) {
			inv.Processes = append(inv.Processes, p)
		}
	}
	sort.Slice(inv.Processes, func(i, j int) bool { return inv.Processes[i].PID < inv.Processes[j].PID })
	sort.Slice(inv.Dirs, func(i, j int) bool { return inv.Dirs[i].PID < inv.Dirs[j].PID })
	return inv, nil
}

// readDir is os.ReadDir; tests replace it to make a directory unreadable,
// which file modes cannot do for root.
var readDir = os.ReadDir

type ringFile struct {
	r  *Ring
	fi os.FileInfo
}

// scan reads one pid directory and decides whether it may be believed.
// It returns the process when the directory is trusted and has rings.
// An error is a directory that could not be read at all.
func (d *PidDir) scan(inv *Inventory) (*Process, error) {
	dfi, err := os.Lstat(d.Dir)
	if err != nil {
		return nil, err
	}
	if !dfi.IsDir() {
		d.Untrusted = fmt.Sprintf("%s is not a directory (%s)", d.Dir, dfi.Mode().Type())
		inv.Problems = append(inv.Problems, Problem{d.Dir, "untrusted, not read: " + d.Untrusted})
		return nil, nil
	}
	ents, err := readDir(d.Dir)
	if err != nil {
		return nil, err
	}
	var id *procfacts.Identity
	var idFI os.FileInfo
	var rings []ringFile
	var problems []Problem
	for _, e := range ents {
		name := e.Name()
		path := filepath.Join(d.Dir, name)
		if name == IdentityFile {
			got, fi, err := procfacts.ReadIdentity(path)
			switch {
			case err != nil:
				problems = append(problems, Problem{path, err.Error()})
			case got.PID != 0 && got.PID != d.PID:
				problems = append(problems, Problem{path, fmt.Sprintf("names pid %d, not %d; ignored", got.PID, d.PID)})
			default:
				id, idFI = got, fi
			}
			continue
		}
		if strings.HasPrefix(name, ".") || !e.Type().IsRegular() {
			continue
		}
		schema, table, err := SplitName(name)
		if err != nil {
			if memt.IsMEMT(path) {
				problems = append(problems, Problem{path, err.Error()})
			}
			continue
		}
		if len(rings) == maxRingsPerDir {
			problems = append(problems, Problem{d.Dir, fmt.Sprintf("more than %d tables; the rest skipped", maxRingsPerDir)})
			break
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed since the listing
		}
		t, err := memt.Open(path)
		if err != nil {
			var fe *memt.FormatError
			if errors.As(err, &fe) && !memt.IsMEMT(path) {
				continue // not ours: MEMH hash tables and other files
			}
			problems = append(problems, Problem{path, err.Error()})
			continue
		}
		r := &Ring{Schema: schema, Table: table, Path: path, PID: d.PID, Columns: t.Columns, TsCol: t.TsCol,
			WriterAlive: t.WriterAlive(), CreatorPID: t.CreatorPID, Counters: t.Counters(),
			Geometry: t.Geometry, Dedup: t.Dedup}
		creatorStart := t.CreatorStart
		t.Close()
		if r.CreatorPID == d.PID && id == nil && creatorStart != 0 {
			// The start time the writer recorded tells its pid's liveness
			// when no identity file does.
			id = &procfacts.Identity{PID: d.PID, StartTime: creatorStart, Rank: -1, LocalRank: -1, NodeRank: -1}
			idFI = nil
		}
		rings = append(rings, ringFile{r, fi})
	}
	if id != nil {
		d.Start = id.StartTime
	}
	d.Owner = pidOwner(d.PID, dfi, id)
	if err := procfacts.CheckFile(dfi, d.Owner); err != nil {
		d.Untrusted = "the directory: " + err.Error()
	} else if idFI != nil {
		if err := procfacts.CheckFile(idFI, d.Owner); err != nil {
			d.Untrusted = "its identity file: " + err.Error()
		}
	}
	if d.Untrusted == "" {
		for _, rf := range rings {
			if err := procfacts.CheckFile(rf.fi, d.Owner); err != nil {
				d.Untrusted = "ring " + filepath.Base(rf.r.Path) + ": " + err.Error()
				break
			}
		}
	}
	if d.Untrusted != "" {
		inv.Problems = append(inv.Problems, Problem{d.Dir, "untrusted, not read: " + d.Untrusted})
		return nil, nil
	}
	inv.Problems = append(inv.Problems, problems...)
	if idFI != nil {
		d.Identity = id
	}
	if end, err := procfacts.ReadEnding(d.Dir, d.Start, d.Owner); err != nil {
		inv.Problems = append(inv.Problems, Problem{filepath.Join(d.Dir, procfacts.ExitsFile), err.Error()})
	} else {
		d.Ending = end
	}
	d.Rings = len(rings)
	if len(rings) == 0 {
		return nil, nil
	}
	p := &Process{PID: d.PID, Dir: d.Dir, UID: d.Owner.UID}
	for _, rf := range rings {
		p.Alive = p.Alive || rf.r.WriterAlive
		p.Rings = append(p.Rings, rf.r)
	}
	p.Identity = tags(d.Identity, d.PID, d.Owner.Live)
	return p, nil
}

// pidOwner is whose files may speak for pid: the running process's
// effective user when it runs and is the process that started at the
// recorded start time, else (it is gone, or the pid was reused, or
// nothing records a start time) the directory's owner.
func pidOwner(pid int, dir os.FileInfo, id *procfacts.Identity) procfacts.Owner {
	if id != nil && id.StartTime != 0 && procfacts.Alive(pid, id.StartTime) {
		if o, err := procfacts.ProcessOwner(pid); err == nil {
			return o
		}
	}
	uid, gid := procfacts.FileIDs(dir)
	return procfacts.Owner{UID: uid, GID: gid}
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

// tags places a process in the job from the agent's identity file when
// there is one (it survives the process), else from the launcher's
// variables in /proc/<pid>/environ while it runs (procfacts.PlaceFromEnv,
// the one reading agent.Discover uses too), else -1s.
func tags(ident *procfacts.Identity, pid int, live bool) Identity {
	id := Identity{Rank: -1, NodeRank: -1, LocalRank: -1}
	if ident != nil {
		return Identity{Host: ident.Host, Addr: ident.Addr, Rank: ident.Rank, NodeRank: ident.NodeRank,
			LocalRank: ident.LocalRank, Role: ident.Role}
	}
	if !live {
		return id
	}
	env, err := procfacts.Env(pid)
	if err != nil && !errors.Is(err, procfacts.ErrTruncated) {
		return id
	}
	pl := procfacts.PlaceFromEnv(env)
	id.Rank, id.LocalRank, id.NodeRank, id.Role = pl.Rank, pl.LocalRank, pl.NodeRank, pl.Role
	return id
}
