package main

import (
	"context"
	"encoding/json"
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

var queryDoc = cmdDoc{Name: "query", Synopsis: "SQL [flags]",
	About: `Run one read-only SQL query over the ring tables in the data dir (live, or left behind by a dead
job), as the MCP query tool does. Tables: schema.table per ring file (python.comm_collective,
python.torch_step_timing, python.trace_event, ...), each with _rank, _pid, _host, ... appended;
probing.table_docs, probing.column_docs, probing.rings; history.*.`,
	Note: "Exit status: 0 on success; 1 when the query failed; 2 on bad usage.",
	Examples: []string{
		`probing-mcp query "SELECT * FROM probing.rings"`,
		`probing-mcp query "SELECT _rank, count(*) AS n, max(duration_ms) FROM python.comm_collective GROUP BY _rank"`,
		`probing-mcp query --data-dir /dev/shm/probing --json "SELECT table_name, doc FROM probing.table_docs"`,
	}}

func query(args []string, stdout, stderr io.Writer) int {
	fs := newCommand(queryDoc)
	asJSON := fs.Bool("json", false, "print the result as JSON (the query tool's shape)")
	dataDir := fs.String("data-dir", "", "read the rings under `DIR` (default $PROBING_DATA_DIR, else /dev/shm/probing or $TMPDIR/probing)")
	limit := fs.Int("limit", sqlengine.DefaultLimit, fmt.Sprintf("print at most `N` rows (max %d)", sqlengine.MaxLimit))
	timeout := fs.Duration("timeout", 20*time.Second, "stop the query after `DURATION`")
	pos, code, done := parseCommand(fs, queryDoc, args, true, stdout, stderr)
	if done {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "probing-mcp query: want exactly one SQL argument (quote it), got %d (probing-mcp query --help)\n", len(pos))
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
