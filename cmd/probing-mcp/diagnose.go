package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"

	"github.com/probing-mcp/probing-mcp/mcp"
	"github.com/probing-mcp/probing-mcp/tools"
)

func diagnose(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("diagnose", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the verdict as JSON (the diagnose_hang tool's structured content)")
	stall := fs.Int("stall-seconds", 0, "no progress for at least `N` seconds counts as a stall (default: 10 typical steps, at least 30 s)")
	ranks := fs.Bool("ranks", false, "also list what every rank is doing")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: probing-mcp diagnose [flags]\n\nIs the job on this node hung, and which rank is the culprit? The diagnose_hang tool's answer, from\n"+
			"the same environment as serve (PROBING_DATA_DIR, PROBING_CTRL_ROOT): live agents, or what a dead job left.\n"+
			"Exit status: 0 when a diagnosis was made (whatever the verdict); 1 when it could not run; 2 on bad usage.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "probing-mcp diagnose: unexpected argument %q (it takes flags only)\n", fs.Arg(0))
		return 2
	}
	level := new(slog.LevelVar)
	level.Set(slog.LevelWarn)
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg, err := mcp.ConfigFromEnv(os.Getenv, versionString(), level, logger)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp diagnose: %v\n", err)
		return 1
	}
	cfg.Env.Logger = logger
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
	return 0
}
