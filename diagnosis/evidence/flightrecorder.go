package evidence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// frDeadline bounds the live Flight Recorder snapshots.
const frDeadline = 4 * time.Second

// FRDump is one rank's Flight Recorder dump as its source gave it.
type FRDump struct {
	Rank int `json:"rank"`
	// From says where it came from (the pid snapshotted, the dump file).
	From string `json:"from"`
	Data []byte `json:"data"`
	// What a live snapshot said of itself (for the history and the
	// snapshot listing); absent for a dump file.
	PID           int    `json:"pid,omitempty"`
	Host          string `json:"host,omitempty"`
	WorldSize     int    `json:"world_size,omitempty"`
	Records       int    `json:"records,omitempty"`
	ProcessGroups int    `json:"process_groups,omitempty"`
	Version       string `json:"version,omitempty"`
	Format        string `json:"format,omitempty"`
	DumpFunction  string `json:"dump_function,omitempty"`
}

// maxFRBytes bounds the raw dumps one gathering keeps.
const maxFRBytes = 512 << 20

// collectFR reads the Flight Recorder of every rank that has one: a live
// snapshot of each live rank that runs torch (a process without torch has
// none, and asking it would only cost the deadline), else the dump file a
// dead rank left (torch writes <prefix><rank> on a watchdog timeout; the
// prefix is in its identity), else the snapshot its agent persisted into
// its rings as it died of a collective's timeout (frpersisted.go). A rank
// whose snapshot or dump fails is a problem; the others are kept.
func collectFR(ctx context.Context, live, dead []*agent.Agent, rings *ringSource, problem func(string, ...any)) []FRDump {
	var torch []*agent.Agent
	for _, a := range live {
		if a.Identity != nil && a.Identity.Torch != "" {
			torch = append(torch, a)
		}
	}
	var out []FRDump
	total := 0
	keep := func(d FRDump) {
		if total+len(d.Data) > maxFRBytes {
			problem("rank %d's Flight Recorder (%d bytes) left out: the dumps kept already hold %d of the %d bytes allowed", d.Rank, len(d.Data), total, maxFRBytes)
			return
		}
		total += len(d.Data)
		out = append(out, d)
	}
	snapped := map[int]bool{}
	if len(torch) > 0 {
		// A rank whose GIL is held answers neither its agent nor (gloo)
		// a dump pipe: the recorder is a second source, not worth the
		// whole deadline.
		fctx, cancel := context.WithTimeout(ctx, frDeadline)
		col := agent.CollectFlightRecorder(fctx, torch, false)
		cancel()
		for _, a := range torch {
			if err := col.Errors[a.PID]; err != nil {
				problem("rank %d's Flight Recorder: %v", a.Rank(), err)
			}
			if s := col.Snapshots[a.PID]; s != nil {
				r := s.Rank
				if r < 0 {
					r = a.Rank()
				}
				snapped[r] = true
				keep(FRDump{Rank: r, From: fmt.Sprintf("pid %d (rank %d)", a.PID, r), Data: s.Data})
			}
		}
	}
	var gone []*agent.Agent
	for _, a := range dead {
		if !snapped[a.Rank()] { // a live process of the rank answered for it
			gone = append(gone, a)
		}
	}
	dumped := map[int]bool{}
	for _, d := range deadDumps(gone, problem) {
		dumped[d.Rank] = true
		keep(d)
	}
	if rings != nil {
		var rest []*agent.Agent
		for _, a := range gone {
			if !dumped[a.Rank()] {
				rest = append(rest, a)
			}
		}
		for _, d := range persistedDumps(ctx, rings.sql, rings.dataDir, rest, rings.endedNS, problem) {
			keep(d)
		}
	}
	return out
}

// ringSource is where the persisted snapshots are read: the rings' engine,
// the data dir (to say where a snapshot is) and each rank's recorded end.
type ringSource struct {
	sql     *sqlengine.Engine
	dataDir string
	endedNS map[int]int64
}

// AnalyzeFR decodes the bundle's raw dumps and analyses them together
// (every node's, on the coordinator), setting FR and FRRanks; a dump that
// does not decode is a problem.
func AnalyzeFR(ctx context.Context, b *Bundle) {
	if len(b.FRDumps) == 0 {
		return
	}
	loaded, problems := LoadFR(ctx, b.FRDumps)
	b.Problems = append(b.Problems, problems...)
	if len(loaded.Dumps) == 0 {
		return
	}
	sort.Slice(loaded.Dumps, func(i, j int) bool { return loaded.Dumps[i].Rank < loaded.Dumps[j].Rank })
	rep, err := fr.AnalyzeLoadedContext(ctx, loaded, fr.Options{})
	if err != nil {
		b.Problems = append(b.Problems, fmt.Sprintf("Flight Recorder analysis: %v", err))
		return
	}
	b.FR = rep
	b.FRRanks = b.FRRanks[:0]
	for _, d := range loaded.Dumps {
		b.FRRanks = append(b.FRRanks, d.Rank)
	}
}

// deadDumps reads the dump file of each dead rank, trusted like the
// rank's other files: a regular file (no link, no FIFO) of the process's
// owner that nobody else can write, read from the file that was checked.
func deadDumps(dead []*agent.Agent, problem func(string, ...any)) []FRDump {
	var out []FRDump
	for _, a := range dead {
		id := a.Identity
		if id == nil || id.FRDumpPrefix == "" || a.Rank() < 0 || !filepath.IsAbs(id.FRDumpPrefix) {
			continue
		}
		p := id.FRDumpPrefix + strconv.Itoa(a.Rank())
		f, fi, err := procfacts.OpenRegular(p)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				problem("rank %d's Flight Recorder dump %s: %v", a.Rank(), jobtext.QuoteTail(p, jobtext.Path), err)
			}
			continue
		}
		err = procfacts.CheckFile(fi, procfacts.Owner{UID: a.UID, GID: -1})
		if err == nil && fi.Size() > agent.MaxSnapshotBytes {
			err = fmt.Errorf("%d bytes, more than the %d read", fi.Size(), agent.MaxSnapshotBytes)
		}
		var b []byte
		if err == nil {
			b, err = io.ReadAll(io.LimitReader(f, agent.MaxSnapshotBytes+1))
		}
		f.Close()
		if err != nil {
			problem("rank %d's Flight Recorder dump %s is not used: %v", a.Rank(), jobtext.QuoteTail(p, jobtext.Path), err)
			continue
		}
		out = append(out, FRDump{Rank: a.Rank(), From: p, Data: b})
	}
	return out
}
