package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/mcp"
	"github.com/probing-mcp/probing-mcp/picture"
)

// rankFlags collects repeated --rank FILE=N mappings.
type rankFlags map[string]int

func (m rankFlags) String() string { return "" }

func (m rankFlags) Set(v string) error {
	path, n, ok := strings.Cut(v, "=")
	r, err := strconv.Atoi(n)
	if !ok || err != nil || r < 0 || path == "" {
		return fmt.Errorf("want FILE=RANK, e.g. dumps/host3.pkl=12")
	}
	m[path] = r
	return nil
}

// cleaned keys the mappings by clean path, as the loader names files.
func (m rankFlags) cleaned() map[string]int {
	out := make(map[string]int, len(m))
	for p, r := range m {
		out[filepath.Clean(p)] = r
	}
	return out
}

// checkRankMap refuses a --rank FILE that is none of the PATHs given nor
// in one of their directories: the loader would silently ignore it.
func checkRankMap(m rankFlags, paths []string, stderr io.Writer) int {
	for p, r := range m {
		cp := filepath.Clean(p)
		ok := false
		for _, root := range paths {
			if cp == root || filepath.Dir(cp) == root {
				ok = true
			}
		}
		if _, err := os.Stat(cp); err != nil || !ok {
			fmt.Fprintf(stderr, "probing-mcp analyze: --rank %s=%d: no such file among the PATHs given; name FILE as a PATH is named, or as a directory given joined with the file's name\n", p, r)
			return 2
		}
	}
	return 0
}

var analyzeDoc = cmdDoc{Name: "analyze", Synopsis: "PATH... [flags]",
	About: `Analyse PyTorch Flight Recorder dumps (one per rank; files or directories): which process group,
collective and ranks hang or disagree. A dump's rank comes from its file name (<prefix><rank>, as
fr_trace reads it); map a file whose name does not end in its rank with --rank FILE=N.`,
	Note: "Exit status: 0 when the analysis ran, whatever it found; 1 when it could not run; 2 on bad usage.",
	Examples: []string{
		"probing-mcp analyze testdata/fr/real/missing_rank          # from the repository root",
		"probing-mcp analyze /tmp/dumps --prefix nccl_trace_rank_ --json",
		"probing-mcp analyze testdata/fr/real/subgroup_missing --html hang.html",
		"probing-mcp analyze dumps/host-a.pkl dumps/host-b.pkl --rank dumps/host-a.pkl=0 --rank dumps/host-b.pkl=1",
	}}

func analyze(args []string, stdout, stderr io.Writer) int {
	fs := newCommand(analyzeDoc)
	asJSON := fs.Bool("json", false, "print the machine-readable report")
	prefix := fs.String("prefix", "", "file-name `PREFIX` before the rank number (default: inferred, like fr_trace -p)")
	pg := fs.String("pg", "", "only the process group with this `NAME` or description")
	ranksFlag := fs.String("ranks", "", "only groups containing these `RANKS` (ranges: 0-3,7)")
	maxSize := fs.String("max-file-size", "", "refuse dump files larger than `SIZE` (default $PROBING_MAX_FILE_SIZE or 64MiB)")
	allowIncomplete := fs.Bool("allow-incomplete-ranks", false, "for the fr_trace side-by-side view: go on despite missing dumps, as fr_trace's flag")
	mismatchCap := fs.Int("mismatch-cap", 10, "fr_trace's --mismatch_cap for the side-by-side view")
	verbose := fs.Bool("verbose", false, "list healthy groups, every warning and fr_trace's transcript")
	maxMemory := fs.String("max-memory", "", "stop with an error, not the OOM killer, once the analysis holds more than `SIZE` (default $"+fr.EnvMaxMemory+" or 3/4 of the memory this process may use)")
	htmlFile := fs.String("html", "", "also write the analysis as a page (wait-for graph, lanes, stacks) to `FILE`")
	showProgress := fs.Bool("progress", false, "report progress on stderr (default: only when stderr is a terminal)")
	rankMap := rankFlags{}
	fs.Var(rankMap, "rank", "map a dump `FILE=N` (rank N) when its name does not end in the rank; repeatable; FILE as it is named on the command line or found in a directory given")
	paths, code, done := parseCommand(fs, analyzeDoc, args, true, stdout, stderr)
	if done {
		return code
	}
	if len(paths) == 0 {
		fmt.Fprintln(stderr, "probing-mcp analyze: no PATH given: pass the dump directory or the dump files (probing-mcp analyze --help)")
		return 2
	}
	opt := fr.LoadOptions{Prefix: *prefix, RankOf: rankMap.cleaned(), RankHint: "pass --rank FILE=N for each such file"}
	lim, err := analyzeLimits(*maxMemory)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp analyze: %v\n", err)
		return 2
	}
	opt.Limits = lim
	progressSet := false
	fs.Visit(func(f *flag.Flag) { progressSet = progressSet || f.Name == "progress" })
	prog := newProgressPrinter(stderr, *showProgress, progressSet)
	report := prog.report
	if gcOff {
		gc := newCollectPast()
		report = func(p fr.Progress) { gc.check(); prog.report(p) }
	}
	opt.Progress = report
	size := *maxSize
	if size == "" {
		size = os.Getenv("PROBING_MAX_FILE_SIZE")
	}
	if size != "" {
		n, err := mcp.ParseByteSize(size)
		if err != nil {
			fmt.Fprintf(stderr, "probing-mcp analyze: max file size: %v\n", err)
			return 2
		}
		opt.MaxFileBytes = n
	}
	var ranks []int
	if *ranksFlag != "" {
		var err error
		if ranks, err = rankset.Parse(*ranksFlag); err != nil {
			fmt.Fprintf(stderr, "probing-mcp analyze: --ranks: %v\n", err)
			return 2
		}
	}
	if code := checkPaths("analyze", paths, stderr); code != 0 {
		return code
	}
	for i := range paths {
		paths[i] = filepath.Clean(paths[i]) // as --rank FILE is keyed
	}
	if code := checkRankMap(rankMap, paths, stderr); code != 0 {
		return code
	}
	logger, _, err := newLogger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp analyze: %v\n", err)
		return 2
	}
	start := time.Now()
	loaded, err := fr.Load(paths, opt)
	prog.phaseDone()
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp analyze: %v\n", err)
		return 1
	}
	loadedAt := time.Now()
	rep, err := fr.AnalyzeLoadedContext(context.Background(), loaded, fr.Options{PG: *pg, Ranks: ranks, Transcript: *verbose || *asJSON,
		Parity: fr.ParityOptions{AllowIncompleteRanks: *allowIncomplete, MismatchCap: *mismatchCap}, Limits: lim, Progress: report})
	prog.phaseDone()
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp analyze: %v\n", err)
		return 1
	}
	logger.Debug("analysed", "dumps", len(loaded.Dumps), "load", loadedAt.Sub(start), "analysis", time.Since(loadedAt))
	if rep.NoMatch != "" {
		fmt.Fprintf(stderr, "probing-mcp analyze: %s\n", rep.NoMatch)
		return 2
	}
	// The rendering is bounded (rank lists cut, "truncated" said) and runs
	// under the memory ceiling like the load and the analysis.
	err = fr.RenderGuarded(context.Background(), lim, stdout, func(w io.Writer) error {
		if *asJSON {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(rep.Bounded())
		}
		// The tools' rendering (fr.View.Text), in the CLI's words.
		_, err := io.WriteString(w, rep.View(fr.TerminalView(*verbose)).Text())
		return err
	})
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp analyze: %v\n", err)
		return 1
	}
	if *htmlFile != "" {
		return writePage("analyze", *htmlFile, picture.FromFlightRecorder(rep), stderr)
	}
	return 0
}
