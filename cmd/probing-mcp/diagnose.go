package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/mcp"
	"github.com/probing-mcp/probing-mcp/picture"
	"github.com/probing-mcp/probing-mcp/tools"
)

var diagnoseDoc = cmdDoc{Name: "diagnose", Synopsis: "[flags]",
	About: `Is the job on this node hung, and which rank is the culprit, in which category, at which line?
The diagnose_hang tool's answer, from the same environment as serve (PROBING_DATA_DIR,
PROBING_CTRL_ROOT): live agents, or what a dead job left.`,
	Note: "Exit status: 0 when a diagnosis was made (whatever the verdict); 1 when it could not run; 2 on bad usage.",
	Examples: []string{
		"probing-mcp diagnose",
		"probing-mcp diagnose --ranks --stall-seconds 60",
		"PROBING_DATA_DIR=/dev/shm/probing probing-mcp diagnose --json",
		"probing-mcp diagnose --html hang.html",
	}}

func diagnose(args []string, stdout, stderr io.Writer) int {
	fs := newCommand(diagnoseDoc)
	asJSON := fs.Bool("json", false, "print the verdict as JSON (the diagnose_hang tool's structured content)")
	stall := fs.Int("stall-seconds", 0, "no progress for at least `N` seconds counts as a stall (default: 10 typical steps, at least 30 s)")
	ranks := fs.Bool("ranks", false, "also list what every rank is doing")
	htmlFile := fs.String("html", "", "also write the verdict as a page (wait-for graph, lanes, stacks) to `FILE`")
	pos, code, done := parseCommand(fs, diagnoseDoc, args, true, stdout, stderr)
	if done {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "probing-mcp diagnose: unexpected argument %q (it takes flags only; probing-mcp diagnose --help)\n", pos[0])
		return 2
	}
	level := new(slog.LevelVar)
	level.Set(slog.LevelWarn)
	logger, err := leveledLogger(stderr, level)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp diagnose: %v\n", err)
		return 2
	}
	cfg, err := mcp.ConfigFromEnv(os.Getenv, versionString(), level, logger)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp diagnose: %v\n", err)
		return 1
	}
	cfg.Env.Logger = logger
	gcfg, err := gpu.ConfigFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp diagnose: %v\n", err)
		return 2
	}
	if gcfg.On {
		// NVML asked once, now (no rings, no lock): a node daemon's rings
		// are read when this finds nothing.
		cfg.Env.GPU = &gpu.Once{Library: gcfg.Library, Host: nodeHost(), Limit: 10 * time.Second}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	p := tools.DiagnoseHangParams{StallSeconds: *stall}
	if *ranks {
		p.Detail, p.Limit = "ranks", 1000
	}
	res, err := tools.Diagnose(ctx, &cfg.Env, p)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp diagnose: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	} else {
		_, err = io.WriteString(stdout, res.ModelText())
	}
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp diagnose: %v\n", err)
		return 1
	}
	if *htmlFile != "" {
		return writePage("diagnose", *htmlFile, picture.FromDiagnosis(&res.Report), stderr)
	}
	return 0
}
