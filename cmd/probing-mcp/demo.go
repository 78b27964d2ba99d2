package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/agent/demojob"
	fr "github.com/probing-mcp/probing-mcp/diag/flightrecorder"
	"github.com/probing-mcp/probing-mcp/diag/stacks"
	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/evidence"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

func demo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	python := fs.String("python", "", "the `interpreter` for the ranks (default $PROBING_PYTHON, else python3)")
	useTorch := fs.String("torch", "auto", "use real torch.distributed (gloo): auto, yes or no")
	exit := fs.Bool("exit", false, "stop the job after printing the diagnosis instead of waiting for Ctrl-C")
	ranks := fs.Int("ranks", 4, "number of ranks")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: probing-mcp demo [flags]\n\nStart a small job (4 ranks) with the in-process agent and an injected hang,\n"+
			"print the diagnosis, then keep the job running for an MCP client until Ctrl-C.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Fprintln(stdout, "Starting the demo job…")
	job, err := demojob.Start(ctx, demojob.Options{Python: *python, Torch: *useTorch, Ranks: *ranks, Version: versionString()})
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp demo: %v\n", err)
		return 1
	}
	defer job.Stop()
	kind := "plain Python ranks synchronising over sockets (torch not importable); rank 2 gets stuck in a fake data loader"
	if job.Torch {
		kind = fmt.Sprintf("torch %s, gloo; rank 2 skips a gradient all_reduce and blocks in a checkpoint", job.TorchVer)
	}
	fmt.Fprintf(stdout, "%d ranks (pids %v): %s.\nWaiting for the hang…\n", job.Opt.Ranks, job.PIDs(), kind)
	waitCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	err = job.WaitHung(waitCtx, 3*time.Second)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp demo: %v\n", err)
		return 1
	}

	opt := agent.Options{DataDir: job.DataDir, CtrlRoot: job.CtrlRoot}
	all, err := agent.Discover(opt)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp demo: %v\n", err)
		return 1
	}
	// Only this job's ranks: other jobs on the node have agents too.
	live, err := agent.Select(all, agent.Selection{PIDs: job.PIDs()})
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp demo: %v\n%s", err, job.Tail(10))
		return 1
	}
	fmt.Fprintf(stdout, "\nThe job is stuck. %d agents answer. What get_stacks sees (identical stacks merged, odd ones out first):\n\n", len(live))
	procs := agent.CollectStacks(ctx, live, agent.StackOptions{})
	merged := stacks.Merge(procs, stacks.MergeOptions{})
	if err := merged.WriteText(stdout); err != nil {
		fmt.Fprintf(stderr, "probing-mcp demo: %v\n", err)
		return 1
	}
	if job.Torch {
		fmt.Fprintln(stdout, "\nWhat snapshot_flight_recorder finds (each rank's Flight Recorder, analysed together):")
		col := agent.CollectFlightRecorder(ctx, live, false)
		rep := fr.AnalyzeLoaded(col.Loaded, fr.Options{})
		if err := rep.WriteText(stdout, false); err != nil {
			fmt.Fprintf(stderr, "probing-mcp demo: %v\n", err)
			return 1
		}
	}

	fmt.Fprintln(stdout, "\nWhat diagnose_hang concludes (every source weighed: rings, stacks, liveness):")
	rep, err := demoVerdict(ctx, job)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp demo: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, indent(rep.Text(), "  "))

	exe, _ := os.Executable()
	if abs, err := filepath.Abs(exe); err == nil {
		exe = abs
	}
	env := map[string]string{"PROBING_DATA_DIR": job.DataDir, "PROBING_CTRL_ROOT": job.CtrlRoot}
	cfg, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"probing-demo": map[string]any{"command": exe, "args": []string{"serve"}, "env": env}}})
	fmt.Fprintf(stdout, "\nExplore it with an MCP client while the demo runs:\n"+
		"  claude mcp add probing-demo -e PROBING_DATA_DIR=%s -e PROBING_CTRL_ROOT=%s -- %s serve\n"+
		"or in claude_desktop_config.json / .vscode/mcp.json:\n  %s\n"+
		"(go run builds a temporary binary: run `make build` and use bin/probing-mcp for a lasting path.)\n"+
		"Then ask: \"why is my job stuck?\"\n", job.DataDir, job.CtrlRoot, exe, cfg)
	if *exit {
		return 0
	}
	fmt.Fprintln(stdout, "\nThe job keeps running; Ctrl-C stops it and removes its files.")
	<-ctx.Done()
	fmt.Fprintln(stdout, "Stopping the demo job.")
	return 0
}

// demoVerdict diagnoses the demo job as diagnose_hang does, polling until
// its stall has lasted past a 5 s stall_seconds (the demo knows it hangs;
// a user's first call on a younger stall gets medium confidence).
func demoVerdict(ctx context.Context, job *demojob.Job) (diagnosis.Report, error) {
	e, err := sqlengine.New(sqlengine.Options{DataDir: job.DataDir})
	if err != nil {
		return diagnosis.Report{}, err
	}
	opt := diagnosis.RunOptions{
		Evidence: evidence.Options{Agents: agent.Options{DataDir: job.DataDir, CtrlRoot: job.CtrlRoot}, SQL: e},
		State:    diagnosis.StateOptions{MinStall: 5 * time.Second},
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		rep := diagnosis.Run(ctx, opt)
		if rep.State == diagnosis.StateStalled && (len(rep.Hypotheses) == 0 || rep.Hypotheses[0].Confidence == diagnosis.High) || ctx.Err() != nil {
			rep.Bound()
			return rep, nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func indent(text, prefix string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(text, "\n") {
		if strings.TrimSpace(l) != "" {
			b.WriteString(prefix)
		}
		b.WriteString(l)
	}
	return b.String()
}
