package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/storage"
	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

func query(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the result as JSON (the query tool's shape)")
	dataDir := fs.String("data-dir", "", "read the rings under `DIR` (default $PROBING_DATA_DIR, else /dev/shm/probing or $TMPDIR/probing)")
	limit := fs.Int("limit", sqlengine.DefaultLimit, fmt.Sprintf("print at most `N` rows (max %d)", sqlengine.MaxLimit))
	timeout := fs.Duration("timeout", 20*time.Second, "stop the query after `DURATION`")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: probing-mcp query SQL [flags]\n\nRun one read-only SQL query over the ring tables in the data dir, as the MCP query tool does.\n"+
			"Tables: schema.table per ring file (python.comm_collective, …), probing.table_docs, probing.column_docs, probing.rings, history.*.\n"+
			"Exit status: 0 on success; 1 when the query failed; 2 on bad usage.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "probing-mcp query: want exactly one SQL argument (quote it), got %d\n", len(pos))
		return 2
	}
	if *limit < 1 || *limit > sqlengine.MaxLimit {
		fmt.Fprintf(stderr, "probing-mcp query: --limit %d: want 1..%d\n", *limit, sqlengine.MaxLimit)
		return 2
	}
	dir := *dataDir
	if dir == "" {
		dir = storage.DataDir(os.Getenv)
	}
	hist := history.DefaultPath(dir)
	if v := strings.TrimSpace(os.Getenv("PROBING_MCP_HISTORY")); v != "" {
		hist = v
		if v == "off" {
			hist = ""
		}
	}
	opt := sqlengine.Options{DataDir: dir, HistoryPath: hist, Timeout: *timeout}
	if err := opt.FromEnv(os.Getenv); err != nil {
		fmt.Fprintf(stderr, "probing-mcp query: %v\n", err)
		return 2
	}
	e, err := sqlengine.New(opt)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp query: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := e.Query(ctx, pos[0], *limit)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp query: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	} else {
		err = res.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp query: %v\n", err)
		return 1
	}
	return 0
}
