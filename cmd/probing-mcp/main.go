// Command probing-mcp is an MCP server and command-line tool that diagnoses
// hung, slow or crashed distributed PyTorch training jobs.
//
//	probing-mcp serve [--http ADDR]     MCP over stdio, or Streamable HTTP at ADDR/mcp
//	probing-mcp diagnose [--json]       is the job hung, and which rank is the culprit
//	probing-mcp analyze PATH... [--json] verdict from Flight Recorder dumps
//	probing-mcp query SQL [--data-dir DIR] [--json]  read-only SQL over the rings
//	probing-mcp agent install|uninstall [--python PATH] [--user]
//	probing-mcp demo [--torch auto|yes|no] [--exit]
//	probing-mcp version
//
// This file only wires flags to the packages that do the work.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/probing-mcp/probing-mcp/cluster/membership"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/metrics"
	"github.com/probing-mcp/probing-mcp/mcp"
	"github.com/probing-mcp/probing-mcp/tools"
	"github.com/probing-mcp/probing-mcp/watch"
)

// version is set at build time with -ldflags "-X main.version=..."; the
// module version or VCS revision is used otherwise.
var version = ""

func main() {
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		tuneGC(len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "analy"))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `probing-mcp: diagnose hung, slow or crashed distributed PyTorch jobs.

Usage:
  probing-mcp serve [--http ADDR] [--log-file PATH] [--job HOST:PORT | --peers ADDR,... | --slurm-port N]
      Serve MCP over stdio (default), or Streamable HTTP at http://ADDR/mcp.
      With --job/--peers the whole job is every tool's scope, through the
      node daemons.
  probing-mcp node [--http ADDR] [--idle-exit DURATION] [--no-register]
      The node daemon: serves this node's ranks to the job's coordinator
      (started by local rank 0's agent, or by hand: srun, a DaemonSet).
  probing-mcp diagnose [--json] [--stall-seconds N] [--ranks]
      Is the job on this node hung, and which rank is the culprit, in which
      category, at which line (the diagnose_hang tool's verdict).
  probing-mcp watch [--json] [--interval D] [--until KIND] [--job HOST:PORT | --peers ADDR,...]
      Follow the job; on a stall, a death or a straggler, capture the evidence
      before a watchdog kills it, diagnose it and print one event per line.
  probing-mcp analyze PATH... [--json] [--prefix P] [--rank FILE=N] [--pg NAME] [--ranks 0-3] [--verbose]
      Analyse Flight Recorder dumps (files or directories): which process
      group, collective and ranks hang or disagree.
  probing-mcp query SQL [--data-dir DIR] [--json] [--limit N]
      Read-only SQL over the ring tables the training processes recorded
      (live or left behind by a dead job), as the MCP query tool runs it.
  probing-mcp export --trace FILE [--ranks 0-3] [--since 10m] [--dumps PATH] [--job HOST:PORT | --peers ADDR,...]
      The collectives the ranks recorded as a Chrome/Perfetto trace (ui.perfetto.dev):
      a track per rank, the stuck calls open-ended; default: the culprit and its group.
  probing-mcp gpu [--devices] [--json] [--rings] [--require]
      What this node's GPUs are doing (NVML now, or the gpu.* rings a sampler
      left), each GPU's signature (spinning, idle, busy, lost, error) and Xids.
  probing-mcp agent install|uninstall [--python PATH] [--user]
      Install the in-process agent into a Python interpreter (activate with PROBING=1).
  probing-mcp demo [--torch auto|yes|no] [--exit]
      Start a 4-rank job with the agent and an injected hang, diagnose it, show
      one SQL query over its rings, and print the MCP client configurations to
      explore it while it runs (Ctrl-C stops it; --exit stops at once).
  probing-mcp skill list|plan|run|validate|install
      Scripted diagnoses from the layered skill roots (bundled, repo, user,
      project, PROBING_SKILLS_DIR); install copies them for Claude/Cursor/Codex.
  probing-mcp version

Run "probing-mcp COMMAND --help" (or "probing-mcp help COMMAND") for a command's flags and examples.

Examples:
  probing-mcp demo --exit
  probing-mcp analyze testdata/fr/real/missing_rank      # from the repository root
  probing-mcp query "SELECT * FROM probing.rings"
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "node":
		return nodeCmd(args[1:], stdout, stderr)
	case "diagnose", "diagnose-hang":
		return diagnose(args[1:], stdout, stderr)
	case "watch":
		return watchCmd(args[1:], stdout, stderr)
	case "analyze", "analyse":
		return analyze(args[1:], stdout, stderr)
	case "query":
		return query(args[1:], stdout, stderr)
	case "export":
		return exportCmd(args[1:], stdout, stderr)
	case "gpu", "gpus":
		return gpuCmd(args[1:], stdout, stderr)
	case "agent":
		return agentCmd(args[1:], stdout, stderr)
	case "demo":
		return demo(args[1:], stdout, stderr)
	case "skill", "skills":
		return skillCmd(args[1:], stdout, stderr)
	case "version", "--version":
		return versionCmd(args[1:], stdout, stderr)
	case "help", "-h", "--help", "-help":
		// "help COMMAND [SUB]" is "COMMAND [SUB] --help".
		if len(args) > 1 && args[0] == "help" {
			return run(append(append([]string(nil), args[1:]...), "--help"), stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "probing-mcp: unknown command %q\n\n%s", args[0], usage)
	return 2
}

var versionDoc = cmdDoc{Name: "version", Synopsis: "", About: "Print the version of this binary (set at build time, else the module version or VCS revision).",
	Examples: []string{"probing-mcp version", "probing-mcp --version"}}

func versionCmd(args []string, stdout, stderr io.Writer) int {
	fs := newCommand(versionDoc)
	pos, code, done := parseCommand(fs, versionDoc, args, false, stdout, stderr)
	if done {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "probing-mcp version: unexpected argument %q (it takes none)\n", pos[0])
		return 2
	}
	fmt.Fprintln(stdout, "probing-mcp", versionString())
	return 0
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "dev-" + s.Value[:12]
			}
		}
	}
	return "dev"
}

// parseInterleaved lets flags follow positional arguments
// ("analyze DIR --json"), which the flag package alone does not.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func newLogger(w io.Writer) (*slog.Logger, *slog.LevelVar, error) {
	level := new(slog.LevelVar)
	l, err := mcp.ParseLogLevel(os.Getenv("PROBING_LOGLEVEL"))
	if err != nil {
		return nil, nil, err
	}
	level.Set(l)
	logger, err := leveledLogger(w, level)
	return logger, level, err
}

var serveDoc = cmdDoc{Name: "serve", Synopsis: "[flags]",
	About: `Serve MCP over stdio (default; what an MCP client starts), or Streamable HTTP at http://ADDR/mcp.
It reads this node's job from PROBING_DATA_DIR and PROBING_CTRL_ROOT; with --job, --peers or
--slurm-port every tool's scope is the whole job, through the node daemons.`,
	Note: "Exit status: 0 when the client disconnected or on Ctrl-C; 1 when serving failed; 2 on bad usage or setup.",
	Examples: []string{
		"probing-mcp serve                                  # stdio, for claude_desktop_config.json / claude mcp add",
		"PROBING_AUTH_TOKEN=secret probing-mcp serve --http 127.0.0.1:8080",
		"probing-mcp serve --peers node1:9781,node2:9781    # the whole job",
		"PROBING_SYSTEM_PORT=9464 probing-mcp serve         # stdio, plus /metrics, /health, /live on 127.0.0.1:9464",
	}}

func serve(args []string, stdout, stderr io.Writer) int {
	fs := newCommand(serveDoc)
	httpAddr := fs.String("http", "", "serve Streamable HTTP on `ADDR` (e.g. 127.0.0.1:8080) instead of stdio")
	logFile := fs.String("log-file", "", "append logs to `PATH` instead of stderr")
	job := fs.String("job", "", "the whole job: its c10d TCPStore `HOST:PORT` (default MASTER_ADDR:MASTER_PORT when set; off: this node only)")
	peers := fs.String("peers", "", "the whole job: its node daemons as `ADDR,...`")
	slurmPort := fs.Int("slurm-port", 0, "the whole job: a node daemon at `PORT` on every node of SLURM_JOB_NODELIST")
	pos, code, done := parseCommand(fs, serveDoc, args, true, stdout, stderr)
	if done {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "probing-mcp serve: unexpected argument %q (it takes flags only; probing-mcp serve --help)\n", pos[0])
		return 2
	}
	logOut := stderr
	if *logFile != "" {
		// A FIFO here would block start-up until something read it.
		f, err := mcp.OpenRegular(*logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "probing-mcp serve: --log-file: %v; pass a regular file\n", err)
			return 1
		}
		defer f.Close()
		logOut = f
	}
	logger, level, err := newLogger(logOut)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp serve: %v\n", err)
		return 2
	}
	cfg, err := mcp.ConfigFromEnv(os.Getenv, versionString(), level, logger)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp serve: %v\n", err)
		return 2
	}
	stopTracing, err := startTracing("server", logger)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp serve: %v\n", err)
		return 2
	}
	defer stopTracing()
	var beats *membership.Registry
	if cfg.Env.Cluster, beats, err = clusterJob(*job, *peers, *slurmPort, cfg.DataDir, logger); err != nil {
		fmt.Fprintf(stderr, "probing-mcp serve: %v\n", err)
		return 2
	}
	gcfg, err := gpu.ConfigFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp serve: %v\n", err)
		return 2
	}
	wcfg, err := watcherFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp serve: %v\n", err)
		return 2
	}
	sys, err := metrics.SystemFromEnv(os.Getenv) // PROBING_SYSTEM_PORT: health, live, /metrics
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp serve: %v\n", err)
		return 2
	}
	if wcfg.on && cfg.Env.History == nil {
		// Opened here, not in mcp.New, so that the watcher keeps its
		// captures in the store the tools read.
		if cfg.Env.History = openHistory(cfg.HistoryPath, logger); cfg.Env.History != nil {
			defer cfg.Env.History.Close()
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.Env.Cluster == nil {
		// This node's GPUs, unless its node daemon samples them (then its
		// rings are read; this server takes over if the daemon exits).
		cfg.Env.GPU = gpu.RunNode(ctx, gcfg, cfg.DataDir, nodeHost(), logger)
	}
	s, err := mcp.New(cfg, logger)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp serve: %v\n", err)
		return 1
	}
	waitWatcher, err := wcfg.start(ctx, cfg.Env.Scope(), cfg.Env.History, nodeHost(), logger, func(watch.Event) { mcp.NotifyAlerts(s) })
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp serve: %v\n", err)
		return 1
	}
	defer func() { stop(); waitWatcher() }()
	if _, err := mcp.ServeSystem(ctx, sys, versionString(), logger); err != nil {
		fmt.Fprintf(stderr, "probing-mcp serve: %v\n", err)
		return 1
	}
	logger.Info("starting", "version", versionString(), "write_tools", cfg.AllowWrite)
	logFileRoots(logger, cfg.Env.Files)
	if *httpAddr == "" {
		err = mcp.ServeStdio(ctx, s, logger)
	} else {
		var hc mcp.HTTPConfig
		if hc, err = mcp.HTTPConfigFromEnv(*httpAddr, os.Getenv); err == nil {
			hc.Version = versionString()
			hc.Extra = heartbeatRoutes(beats, hc.AuthToken, logger)
			err = mcp.ServeHTTP(ctx, s, hc, logger)
		}
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		fmt.Fprintf(stderr, "probing-mcp serve: %v\n", err)
		return 1
	}
	return 0
}

// logFileRoots says what the file tools may read and why, and which
// default candidates were left out: the one place an operator sees the
// policy a spawned server runs with.
func logFileRoots(logger *slog.Logger, p tools.FilePolicy) {
	if len(p.Roots) == 0 {
		logger.Warn("file tools may read nothing; set PROBING_ALLOWED_FILE_DIRS to the directories that hold the dumps")
	}
	for _, r := range p.Roots {
		logger.Info("file tools may read", "root", r.String(), "why", r.Why)
	}
	for _, r := range p.Skipped {
		logger.Info("file tools may not read", "path", r.String(), "why", r.Why)
	}
}
