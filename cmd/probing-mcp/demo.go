package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/demojob"
	"github.com/probing-mcp/probing-mcp/picture"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

var demoDoc = cmdDoc{Name: "demo", Synopsis: "[flags]",
	About: `Start a small job (4 ranks) with the in-process agent and an injected hang, and show what the
tools see: the merged stacks, the Flight Recorder (with torch), diagnose_hang's verdict and one SQL
query over the ranks' ring tables. Then keep the job running for an MCP client, printing its
configuration, until Ctrl-C; --exit stops it at once. Either way the demo kills its processes and
removes its directory (under $TMPDIR) when it ends.`,
	Note: "Exit status: 0 when the demo ran; 1 when it failed (the ranks' log tails say why); 2 on bad usage.",
	Examples: []string{
		"probing-mcp demo --exit                 # diagnose the hang and stop",
		"probing-mcp demo                        # keep the job for an MCP client until Ctrl-C",
		"probing-mcp demo --torch yes --python ~/venv/bin/python",
	}}

func demo(args []string, stdout, stderr io.Writer) int {
	fs := newCommand(demoDoc)
	python := fs.String("python", "", "the `interpreter` for the ranks (default $PROBING_PYTHON, else python3)")
	useTorch := fs.String("torch", "auto", "use real torch.distributed (gloo): auto, yes or no")
	exit := fs.Bool("exit", false, "stop the job after printing the diagnosis instead of waiting for Ctrl-C")
	ranks := fs.Int("ranks", 4, "number of ranks (2-64)")
	htmlFile := fs.String("html", "", "also write the diagnosis as a page (wait-for graph, lanes, stacks) to `FILE`")
	pos, code, done := parseCommand(fs, demoDoc, args, true, stdout, stderr)
	if done {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "probing-mcp demo: unexpected argument %q (it takes flags only; probing-mcp demo --help)\n", pos[0])
		return 2
	}
	if err := oneOf("torch", *useTorch, "auto", "yes", "no"); err != nil {
		fmt.Fprintf(stderr, "probing-mcp demo: %v\n", err)
		return 2
	}
	if *ranks < 2 || *ranks > 64 {
		fmt.Fprintf(stderr, "probing-mcp demo: --ranks %d: want 2 to 64\n", *ranks)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// `demo | head`: once the reader is gone, a write would kill the
	// process with SIGPIPE before any cleanup. Asking for SIGPIPE turns it
	// into EPIPE, and the first EPIPE ends the demo, which then cleans up.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := &pipeGuard{w: stdout, broken: cancel}
	fail := func(err error) int {
		if out.isBroken() {
			fmt.Fprintln(stderr, "probing-mcp demo: stdout was closed; stopped the job and removed its files")
		} else if ctx.Err() != nil {
			fmt.Fprintln(stderr, "probing-mcp demo: interrupted; stopped the job and removed its files")
		} else {
			fmt.Fprintf(stderr, "probing-mcp demo: %v\n", err)
		}
		return 1
	}

	fmt.Fprintln(out, "Starting the demo job…")
	job, err := demojob.Start(ctx, demojob.Options{Python: *python, Torch: *useTorch, Ranks: *ranks, Version: versionString()})
	if err != nil {
		return fail(err)
	}
	defer job.Stop()
	kind := "plain Python ranks synchronising over sockets (torch not importable); rank 2 gets stuck in a fake data loader"
	if job.Torch {
		kind = fmt.Sprintf("torch %s, gloo; rank 2 skips a gradient all_reduce and blocks in a checkpoint", job.TorchVer)
	}
	fmt.Fprintf(out, "%d ranks (pids %v): %s.\nWaiting for the hang…\n", job.Opt.Ranks, job.PIDs(), kind)
	waitCtx, cancelWait := context.WithTimeout(ctx, 3*time.Minute)
	err = job.WaitHung(waitCtx, 3*time.Second)
	cancelWait()
	if err != nil {
		return fail(err)
	}

	opt := agent.Options{DataDir: job.DataDir, CtrlRoot: job.CtrlRoot}
	all, err := agent.Discover(opt)
	if err != nil {
		return fail(err)
	}
	// Only this job's ranks: other jobs on the node have agents too.
	live, err := agent.Select(all, agent.Selection{PIDs: job.PIDs()})
	if err != nil {
		return fail(fmt.Errorf("%v\n%s", err, job.Tail(10)))
	}
	fmt.Fprintf(out, "\nThe job is stuck. %d agents answer. What get_stacks sees (identical stacks merged, odd ones out first):\n\n", len(live))
	procs := agent.CollectStacks(ctx, live, agent.StackOptions{})
	merged := stacks.Merge(procs, stacks.MergeOptions{})
	if _, err := io.WriteString(out, merged.Text(stacks.TextOptions{})); err != nil {
		return fail(err)
	}
	repo := findRepo()
	if job.Torch {
		fmt.Fprintln(out, "\nWhat snapshot_flight_recorder finds (each rank's Flight Recorder, analysed together):")
		col := agent.CollectFlightRecorder(ctx, live, false)
		rep := fr.AnalyzeLoaded(col.Loaded, fr.Options{})
		if _, err := io.WriteString(out, rep.View(fr.ViewOptions{}).Text()); err != nil {
			return fail(err)
		}
	}

	fmt.Fprintln(out, "\nWhat diagnose_hang concludes (every source weighed: rings, stacks, liveness):")
	rep, err := demoVerdict(ctx, job)
	if err != nil {
		return fail(err)
	}
	fmt.Fprint(out, indent(rep.Text(), "  "))
	if *htmlFile != "" {
		if err := picture.WriteFile(*htmlFile, picture.FromDiagnosis(&rep), picture.Options{Made: time.Now()}); err != nil {
			return fail(fmt.Errorf("--html %s: %v", *htmlFile, err))
		}
		fmt.Fprintf(out, "\nThe diagnosis as a page: %s (open it in a browser).\n", *htmlFile)
	}

	cli := cliFor(*exit, job.Dir, repo)
	if err := demoSQL(out, job, cli, *exit); err != nil {
		return fail(err)
	}
	if !job.Torch {
		fmt.Fprintf(out, "\nWithout torch there is no Flight Recorder here. Real dumps of the same hang (4 gloo ranks, rank 2\n"+
			"skipped an all_reduce; torch 2.15) ship with the repository; analyse them as analyze_flight_recorder does:\n  %s\n", frDumpsCommand(cli.lasting, repo))
	}
	if *exit {
		fmt.Fprintf(out, "\nThe job is stopped and its files removed. To explore it with an MCP client, keep it running:\n"+
			"  make demo    (or: %s demo)\n"+
			"It then prints the `claude mcp add` command and the Claude Desktop and VS Code configurations\n"+
			"for the live job, valid until Ctrl-C.\n", cli.lasting)
		if out.isBroken() {
			return fail(nil)
		}
		return 0
	}
	if cli.err != nil {
		return fail(cli.err)
	}
	printMCPConfig(out, cli, job)
	fmt.Fprintln(out, "\nThe job keeps running; Ctrl-C stops it and removes its files.")
	<-ctx.Done()
	if out.isBroken() {
		return fail(nil)
	}
	fmt.Fprintln(out, "Stopping the demo job.")
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
		Scope: &evidence.Node{Agents: agent.Options{DataDir: job.DataDir, CtrlRoot: job.CtrlRoot}, SQL: e},
		State: diagnosis.StateOptions{MinStall: 5 * time.Second},
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		rep, err := diagnosis.Run(ctx, opt)
		if err != nil {
			return rep, err
		}
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
