package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/mcp"
	"github.com/probing-mcp/probing-mcp/traceexport"
)

var exportDoc = cmdDoc{Name: "export", Synopsis: "--trace FILE [flags]",
	About: `Write the collectives the ranks recorded as a Chrome trace (JSON) that ui.perfetto.dev and
chrome://tracing open: one track per rank (a process per node), a slice per collective with its
group, sequence number, op, shape, dtype and bytes; a call still running ends at the read time
with still_inside; a rank that never entered a collective its group is stuck in gets a mark.
Read from the rings (python.comm_collective; this node, or the whole job with --job/--peers),
or from Flight Recorder dumps (--dumps, post mortem). Bounded: by default the culprit of the
diagnosis and its group; --ranks, --since and --max-events narrow it, and a cut is said on
stderr and in the trace's metadata.`,
	Note: "Exit status: 0 when the trace was written; 1 when nothing could be read or written; 2 on bad usage.",
	Examples: []string{
		"probing-mcp export --trace hang.json",
		"probing-mcp export --trace hang.json --ranks 0-3,7 --since 10m",
		"probing-mcp export --trace fr.json --dumps /tmp/fr_dumps --ranks 0-15",
		"probing-mcp export --trace job.json --peers node1:9781,node2:9781",
	}}

func exportCmd(args []string, stdout, stderr io.Writer) int {
	fs := newCommand(exportDoc)
	out := fs.String("trace", "", "write the Chrome/Perfetto trace to `FILE` (- for stdout)")
	ranksFlag := fs.String("ranks", "", "the ranks to show, as `SET` (0-3,7); default: the diagnosis' culprit and its group")
	since := fs.Duration("since", 0, "only calls entered in the last `DURATION` (10m, 1h; default: all the rings hold)")
	maxEv := fs.Int("max-events", traceexport.DefaultMaxEvents, fmt.Sprintf("keep at most the newest `N` calls (max %d)", traceexport.MaxEvents))
	dumps := fs.String("dumps", "", "read Flight Recorder dumps under `PATH` (a file or directory) instead of the rings")
	stall := fs.Int("stall-seconds", 0, "the diagnosis' stall threshold in `N` seconds, for the default selection")
	timeout := fs.Duration("timeout", time.Minute, "give up after `DURATION`")
	job := fs.String("job", "", "the whole job: its c10d TCPStore `HOST:PORT`")
	peers := fs.String("peers", "", "the whole job: its node daemons as `ADDR,...`")
	slurmPort := fs.Int("slurm-port", 0, "the whole job: a node daemon at `PORT` on every node of SLURM_JOB_NODELIST")
	pos, code, done := parseCommand(fs, exportDoc, args, true, stdout, stderr)
	if done {
		return code
	}
	fail := func(code int, f string, a ...any) int {
		fmt.Fprintf(stderr, "probing-mcp export: "+f+"\n", a...)
		return code
	}
	switch {
	case len(pos) > 0:
		return fail(2, "unexpected argument %q (it takes flags only; probing-mcp export --help)", pos[0])
	case *out == "":
		return fail(2, "say where the trace goes: --trace FILE (a Chrome/Perfetto JSON trace; - for stdout)")
	case *maxEv < 1 || *maxEv > traceexport.MaxEvents:
		return fail(2, "--max-events %d: want 1..%d", *maxEv, traceexport.MaxEvents)
	case *since < 0:
		return fail(2, "--since %s: want a positive duration such as 10m", *since)
	case *timeout <= 0:
		return fail(2, "--timeout %s: want a positive duration such as 1m", *timeout)
	case *dumps != "" && (*job != "" || *peers != "" || *slurmPort != 0):
		return fail(2, "--dumps reads the dump files given; --job/--peers/--slurm-port read the live rings: pass one or the other")
	}
	var sel []int
	if *ranksFlag != "" {
		var err error
		if sel, err = rankset.Parse(*ranksFlag); err != nil {
			return fail(2, "--ranks: %v", err)
		}
		if len(sel) == 0 {
			return fail(2, "--ranks %q names no rank; pass a set such as 0-3,7", *ranksFlag)
		}
		if len(sel) > traceexport.MaxRanks {
			return fail(2, "--ranks names %d ranks; a trace holds at most %d tracks: narrow it", len(sel), traceexport.MaxRanks)
		}
	}
	dest, err := openTrace(*out, stdout)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer dest.discard()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	readAt := time.Now()
	opt := traceexport.Options{ReadUS: readAt.UnixMicro(), MaxEvents: *maxEv, Version: versionString(), Ranks: sel}
	if *ranksFlag != "" {
		opt.Why = "--ranks " + rankset.FormatMax(sel, rankset.MaxText)
	}
	if *since > 0 {
		opt.SinceUS = readAt.Add(-*since).UnixMicro()
	}
	var calls []traceexport.Call
	if *dumps != "" {
		calls, err = dumpCalls(ctx, *dumps, *since, &opt)
	} else {
		calls, err = ringCalls(ctx, stderr, ringSource{job: *job, peers: *peers, slurmPort: *slurmPort, stall: *stall}, &opt)
	}
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return fail(ee.code, "%s", ee.msg)
		}
		return fail(1, "%v", err)
	}
	trace, sum := traceexport.Build(calls, opt)
	if err := dest.commit(trace); err != nil {
		return fail(1, "%v", err)
	}
	where := *out
	if where == "-" {
		where = "stdout"
	}
	fmt.Fprintf(stderr, "probing-mcp export: wrote %s: %s (selection: %s)\n", where, sum.Words(), opt.Why)
	if sum.Truncated() {
		fmt.Fprintf(stderr, "probing-mcp export: truncated: %s\n", trace.Metadata.LeftOut)
	}
	for _, n := range opt.Notes {
		fmt.Fprintf(stderr, "probing-mcp export: note: %s\n", n)
	}
	if *out != "-" {
		fmt.Fprintf(stderr, "probing-mcp export: open it at https://ui.perfetto.dev (Open trace file) or chrome://tracing\n")
	}
	return 0
}

// exitError is a failure with its own exit status (2: bad setup).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// dumpCalls reads the calls from Flight Recorder dumps; without --ranks
// the analysis' culprit and its group are selected. --since counts back
// from the dumps' newest time, which is also the end drawn for the calls
// not completed.
func dumpCalls(ctx context.Context, path string, since time.Duration, opt *traceexport.Options) ([]traceexport.Call, error) {
	loaded, err := fr.LoadContext(ctx, []string{path}, fr.LoadOptions{})
	if err != nil {
		return nil, err
	}
	if len(loaded.Dumps) == 0 {
		return nil, fmt.Errorf("no Flight Recorder dump under %s (%d file(s) were not dumps)", path, loaded.Ignored)
	}
	for i, p := range loaded.Problems {
		if i == maxNotes {
			opt.Notes = append(opt.Notes, fmt.Sprintf("and %d more file(s) not used", len(loaded.Problems)-i))
			break
		}
		opt.Notes = append(opt.Notes, "not used: "+p.Text())
	}
	calls, lastUS := traceexport.FromFlightRecorder(loaded)
	opt.Source, opt.ReadUS = "flight_recorder", lastUS
	if since > 0 {
		opt.SinceUS = lastUS - since.Microseconds()
		calls = slices.DeleteFunc(calls, func(c traceexport.Call) bool { return c.StartUS < opt.SinceUS })
	}
	if len(opt.Ranks) == 0 {
		rep, err := fr.AnalyzeLoadedContext(ctx, loaded, fr.Options{})
		if err != nil {
			return nil, fmt.Errorf("the analysis that picks the ranks failed: %v (pass --ranks to choose them)", err)
		}
		s := traceexport.DumpSelection(rep, loaded)
		opt.Ranks, opt.Why = s.Ranks, s.Why
	}
	return calls, nil
}

// ringSource is where the rings are: this node, or the whole job.
type ringSource struct {
	job, peers       string
	slurmPort, stall int
}

// ringCalls reads the calls from the rings of the scope (this node, or
// the whole job through its node daemons); without --ranks the
// diagnosis' culprit and its group are selected. The ranks whose process
// is gone are found too (the verdict's bundle, else a pulse: liveness
// only, no rank asked).
func ringCalls(ctx context.Context, stderr io.Writer, src ringSource, opt *traceexport.Options) ([]traceexport.Call, error) {
	level := new(slog.LevelVar)
	level.Set(slog.LevelWarn)
	logger, err := leveledLogger(stderr, level)
	if err != nil {
		return nil, &exitError{2, err.Error()}
	}
	cfg, err := mcp.ConfigFromEnv(os.Getenv, versionString(), level, logger)
	if err != nil {
		return nil, &exitError{2, err.Error()}
	}
	cfg.Env.Logger = logger
	if cfg.Env.Cluster, _, err = clusterJob(src.job, src.peers, src.slurmPort, cfg.DataDir, logger); err != nil {
		return nil, &exitError{2, err.Error()}
	}
	scope := cfg.Env.Scope()
	if len(opt.Ranks) == 0 {
		var b *evidence.Bundle
		rep, err := diagnosis.Run(ctx, diagnosis.RunOptions{Scope: scope, State: diagnosis.StallOptions(src.stall),
			Gathered: func(g *evidence.Bundle) { b = g }})
		if err != nil {
			return nil, fmt.Errorf("the diagnosis that picks the ranks failed: %v (pass --ranks to choose them)", err)
		}
		if b == nil || (len(b.Ranks) == 0 && len(b.Comm) == 0) {
			return nil, fmt.Errorf("no training job found here: nothing to export (is PROBING_DATA_DIR the job's, or pass --job/--peers for the whole job)")
		}
		s := traceexport.DefaultSelection(rep, b.Comm, b.World)
		if len(s.Ranks) == 0 {
			return nil, fmt.Errorf("no rank to show: %s (pass --ranks)", s.Why)
		}
		opt.Ranks, opt.Why, opt.Gone = s.Ranks, s.Why, goneOf(b)
	} else if b, _, err := scope.Pulse(ctx); err == nil {
		opt.Gone = goneOf(b)
	}
	read, err := traceexport.ReadRings(ctx, scope, opt.Ranks, opt.SinceUS, opt.ReadUS, opt.MaxEvents)
	if err != nil {
		return nil, err
	}
	opt.Source = "comm_rings"
	opt.Dropped, opt.DroppedBeforeUS, opt.DroppedAtLeast = read.Dropped, read.DroppedBeforeUS, read.DroppedAtLeast
	opt.Notes = append(opt.Notes, read.Notes...)
	return read.Calls, nil
}

// maxNotes bounds the files named as not used (a directory of thousands
// of other files).
const maxNotes = 16

// goneOf is the bundle's ranks whose process has ended, with when (µs,
// 0 unrecorded).
func goneOf(b *evidence.Bundle) map[int]int64 {
	gone := map[int]int64{}
	if b == nil {
		return gone
	}
	for r, e := range b.Ranks {
		if e != nil && !e.Alive {
			gone[r] = e.EndedNS / 1000
		}
	}
	return gone
}

// traceFile is where the trace goes: a file beside path, renamed into
// place once written, so that a failed export leaves no half trace; "-"
// is stdout. It is made before anything is read, so a path that cannot
// be written is said at once.
type traceFile struct {
	path string
	f    *os.File
	w    io.Writer
}

func openTrace(path string, stdout io.Writer) (*traceFile, error) {
	if path == "-" {
		return &traceFile{path: path, w: stdout}, nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("--trace %s: cannot write in %s: %v", path, filepath.Dir(path), err)
	}
	return &traceFile{path: path, f: f, w: f}, nil
}

// commit writes the trace and puts the file in place.
func (t *traceFile) commit(tr *traceexport.Trace) error {
	if err := tr.Write(t.w); err != nil {
		return fmt.Errorf("writing %s: %w", t.path, err)
	}
	if t.f == nil {
		return nil
	}
	if err := t.f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", t.path, err)
	}
	if err := os.Rename(t.f.Name(), t.path); err != nil {
		return fmt.Errorf("--trace %s: %w", t.path, err)
	}
	t.f = nil
	return nil
}

// discard removes the file of a trace not committed.
func (t *traceFile) discard() {
	if t.f != nil {
		t.f.Close()
		os.Remove(t.f.Name())
	}
}
