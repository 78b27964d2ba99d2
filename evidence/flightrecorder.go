package evidence

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	fr "github.com/probing-mcp/probing-mcp/diag/flightrecorder"
	"github.com/probing-mcp/probing-mcp/procfacts"
)

// frDeadline bounds the live Flight Recorder snapshots.
const frDeadline = 4 * time.Second

// gatherFR reads the Flight Recorder of every rank that has one: a live
// snapshot of each live rank that runs torch (a process without torch has
// none, and asking it would only cost the deadline), else the dump file a
// dead rank left (torch writes <prefix><rank> on a watchdog timeout; the
// prefix is in its identity). They are analysed together. A rank whose
// snapshot or dump fails is a problem; the others are still analysed.
func gatherFR(ctx context.Context, live, dead []*agent.Agent, problem func(string, ...any)) (*fr.Report, []int) {
	var torch []*agent.Agent
	for _, a := range live {
		if a.Identity != nil && a.Identity.Torch != "" {
			torch = append(torch, a)
		}
	}
	loaded := &fr.Loaded{}
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
		}
		loaded.Dumps = append(loaded.Dumps, col.Loaded.Dumps...)
	}
	snapped := map[int]bool{}
	for _, d := range loaded.Dumps {
		snapped[d.Rank] = true
	}
	var gone []*agent.Agent
	for _, a := range dead {
		if !snapped[a.Rank()] { // a live process of the rank answered for it
			gone = append(gone, a)
		}
	}
	if paths, rankOf := deadDumps(gone, problem); len(paths) > 0 {
		l, err := fr.LoadContext(ctx, paths, fr.LoadOptions{RankOf: rankOf})
		if err != nil {
			problem("dead ranks' Flight Recorder dumps: %v", err)
		} else {
			loaded.Dumps = append(loaded.Dumps, l.Dumps...)
			for _, p := range l.Problems {
				problem("Flight Recorder dump %s: %s", p.Path, p.Problem)
			}
		}
	}
	if len(loaded.Dumps) == 0 {
		return nil, nil
	}
	rep, err := fr.AnalyzeLoadedContext(ctx, loaded, fr.Options{})
	if err != nil {
		problem("Flight Recorder analysis: %v", err)
		return nil, nil
	}
	var ranks []int
	for _, d := range loaded.Dumps {
		ranks = append(ranks, d.Rank)
	}
	sort.Ints(ranks)
	return rep, ranks
}

// deadDumps finds the dump file of each dead rank, trusted like the
// rank's other files: a regular file (no link, no FIFO) of the process's
// owner that nobody else can write.
func deadDumps(dead []*agent.Agent, problem func(string, ...any)) ([]string, map[string]int) {
	var paths []string
	rankOf := map[string]int{}
	for _, a := range dead {
		id := a.Identity
		if id == nil || id.FRDumpPrefix == "" || a.Rank() < 0 || !filepath.IsAbs(id.FRDumpPrefix) {
			continue
		}
		p := id.FRDumpPrefix + strconv.Itoa(a.Rank())
		f, fi, err := procfacts.OpenRegular(p)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				problem("rank %d's Flight Recorder dump %s: %v", a.Rank(), p, err)
			}
			continue
		}
		f.Close()
		if err := procfacts.CheckFile(fi, procfacts.Owner{UID: a.UID, GID: -1}); err != nil {
			problem("rank %d's Flight Recorder dump %s is not used: %v", a.Rank(), p, err)
			continue
		}
		paths = append(paths, p)
		rankOf[p] = a.Rank()
	}
	return paths, rankOf
}
