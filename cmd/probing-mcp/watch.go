package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/mcp"
	"github.com/probing-mcp/probing-mcp/watch"
	"github.com/probing-mcp/probing-mcp/watch/alert"
)

var watchDoc = cmdDoc{Name: "watch", Synopsis: "[flags]",
	About: `Follow the job and say when it stalls, a rank dies or a straggler slows it, before a
watchdog kills it. Each tick reads only liveness and the rings' progress (no rank is asked or
signalled while the job moves); the stall threshold is learned from the job's own steps. On a
stall or a death the evidence (stacks, Flight Recorder, GPUs) is captured at once into the
history, diagnosed, and printed as one event per line.`,
	Note: "Exit status: 0 when stopped (Ctrl-C, --for, --until); 1 when it could not start; 2 on bad usage.",
	Examples: []string{
		"probing-mcp watch",
		"probing-mcp watch --json --until stalled",
		"probing-mcp watch --peers node1:9781,node2:9781 --interval 2s",
	}}

func watchCmd(args []string, stdout, stderr io.Writer) int {
	fs := newCommand(watchDoc)
	asJSON := fs.Bool("json", false, "print each event as one JSON line (with its verdict's headline)")
	interval := fs.Duration("interval", time.Second, "read the job's pulse every `DURATION`")
	stall := fs.Int("stall-seconds", 0, "hold a stall for `N` seconds before calling it confirmed (default: 30 s; a high-confidence culprit is said sooner)")
	forDur := fs.Duration("for", 0, "stop after `DURATION` (default: until interrupted)")
	until := fs.String("until", "", "stop after the first event of one of `KINDS` (comma-separated: captured, stalled, dead, paused, moving, slow, blind)")
	job := fs.String("job", "", "the whole job: its c10d TCPStore `HOST:PORT`")
	peers := fs.String("peers", "", "the whole job: its node daemons as `ADDR,...`")
	slurmPort := fs.Int("slurm-port", 0, "the whole job: a node daemon at `PORT` on every node of SLURM_JOB_NODELIST")
	act := fs.Bool("act", false, "on a confirmed stall or death, ask torch to dump each rank's Flight Recorder through its dump pipe (this node; audited in history.audit); off: observe only")
	pos, code, done := parseCommand(fs, watchDoc, args, true, stdout, stderr)
	if done {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "probing-mcp watch: unexpected argument %q (it takes flags only; probing-mcp watch --help)\n", pos[0])
		return 2
	}
	if *interval < 100*time.Millisecond {
		fmt.Fprintf(stderr, "probing-mcp watch: --interval %s is too short; pass 100ms or more\n", *interval)
		return 2
	}
	stopOn := map[watch.Kind]bool{}
	for _, k := range strings.Split(*until, ",") {
		switch k := watch.Kind(strings.TrimSpace(k)); k {
		case "":
		case watch.KindCaptured, watch.KindStalled, watch.KindDead, watch.KindPaused, watch.KindMoving, watch.KindSlow, watch.KindBlind:
			stopOn[k] = true
		default:
			fmt.Fprintf(stderr, "probing-mcp watch: --until %q is no event kind; pass captured, stalled, dead, paused, moving, slow or blind (comma-separated)\n", k)
			return 2
		}
	}
	logger, level, err := newLogger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp watch: %v\n", err)
		return 2
	}
	cfg, err := mcp.ConfigFromEnv(os.Getenv, versionString(), level, logger)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp watch: %v\n", err)
		return 2
	}
	cfg.Env.Logger = logger
	acfg, err := alert.ConfigFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp watch: %v\n", err)
		return 2
	}
	if cfg.Env.Cluster, _, err = clusterJob(*job, *peers, *slurmPort, cfg.DataDir, logger); err != nil {
		fmt.Fprintf(stderr, "probing-mcp watch: %v\n", err)
		return 2
	}
	hist := openHistory(cfg.HistoryPath, logger)
	if hist != nil {
		defer hist.Close()
	}
	cfg.Env.History = hist // a dead rank's last place, for the verdicts it draws
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *forDur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *forDur)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := diagnosis.StallOptions(*stall)
	sender, drain := alertSender(acfg, logger)
	defer drain()
	var actFn func(context.Context, watch.Event) string
	if *act {
		if cfg.Env.Cluster != nil {
			fmt.Fprintf(stderr, "probing-mcp watch: --act acts on this node's ranks only; run it on each node (or in each node daemon), not with --job/--peers\n")
			return 2
		}
		actFn = actDumpPipes(cfg.Env.Agents, hist, logger)
	}
	var writeErr error
	w, err := watch.New(watch.Options{Alerts: sender, Act: actFn, Scope: cfg.Env.Scope(), State: st, Interval: *interval, History: hist,
		Job: jobName(), Host: nodeHost(), Logger: logger,
		Notify: func(e watch.Event) {
			if *asJSON {
				b, _ := json.Marshal(e)
				_, writeErr = fmt.Fprintf(stdout, "%s\n", b)
			} else {
				_, writeErr = fmt.Fprintf(stdout, "%s\n", e.Line())
			}
			if writeErr != nil || stopOn[e.Kind] {
				cancel()
			}
		}})
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp watch: %v\n", err)
		return 1
	}
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "probing-mcp watch: %v\n", err)
		return 1
	}
	if writeErr != nil {
		fmt.Fprintf(stderr, "probing-mcp watch: %v\n", writeErr)
		return 1
	}
	return 0
}

// jobName names the watched job in events: torchrun's run id, SLURM's
// job id, else nothing (the host says where).
func jobName() string {
	for _, k := range []string{"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PROBING_JOB_NAME"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return ""
}
