package mcp_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/storage/memt"
)

// TestE2EStdioQuery drives query, describe_tables and the schema resources
// through the official Python client, over rings written into a fresh data
// dir by two "processes", and checks that a verdict lands in the persisted
// history where query can read it back.
func TestE2EStdioQuery(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	data := t.TempDir()
	cols := []memt.Column{{Name: "timestamp", Type: memt.I64}, {Name: "rank", Type: memt.I64}, {Name: "op", Type: memt.Str}, {Name: "duration_ms", Type: memt.F64}}
	for pid, rank := range map[int]int{4101: 0, 4102: 1} {
		w, err := memt.Create(filepath.Join(data, fmt.Sprint(pid), "python.comm_collective"), cols, memt.Options{ChunkSize: 4096, NumChunks: 4})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10+rank*5; i++ {
			if err := w.Row().I64(int64(1000 + i)).I64(int64(rank)).Str("all_reduce").F64(float64(i)).Commit(); err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
	}
	w, err := memt.Create(filepath.Join(data, "4101", "custom.gauges"), []memt.Column{{Name: "ts", Type: memt.I64}, {Name: "value", Type: memt.F32}}, memt.Options{ChunkSize: 1024, NumChunks: 2})
	if err != nil {
		t.Fatal(err)
	}
	w.Row().I64(1).F32(0.5).Commit()
	w.Close()

	env := e2eEnv("PROBING_DATA_DIR="+data, "PROBING_ALLOWED_FILE_DIRS="+h.fr(""))
	calls := [][]string{
		e2eArgs("query", map[string]any{"sql": "SELECT _pid, rank, count(*) AS n FROM python.comm_collective GROUP BY _pid ORDER BY _pid"}),
		e2eArgs("query", map[string]any{"sql": "SELECT timestamp FROM python.comm_collective", "limit": 3}),
		e2eArgs("query", map[string]any{"sql": "DELETE FROM python.comm_collective"}),
		e2eArgs("query", map[string]any{"sql": "SELECT * FROM python.no_such_table"}),
		e2eArgs("describe_tables", map[string]any{}),
		e2eArgs("describe_tables", map[string]any{"table": "python.comm_collective"}),
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}}),
		e2eArgs("query", map[string]any{"sql": "SELECT kind, verdict, culprit_ranks FROM history.diagnoses"}),
	}
	args := slices.Concat(calls...)
	args = append(args, "--read", "probing://schema/catalog", "--read", "probing://schema/python/comm_collective",
		"--read", "probing://schema/custom/gauges", "--read", "probing://schema/nope/nope")
	out := h.stdio(t, env, "stdio-list", args...)
	out.mustOK(t)
	if len(out.Calls) != len(calls) {
		t.Fatalf("%d calls reported, want %d%s", len(out.Calls), len(calls), out.summary())
	}
	for _, name := range []string{"query", "describe_tables"} {
		tl := out.tool(name)
		if tl == nil {
			t.Fatalf("%s not listed", name)
		}
		checkHints(t, tl, true, false, true, false)
	}

	type qres struct {
		Columns   []string         `json:"columns"`
		Rows      []map[string]any `json:"rows"`
		RowCount  int              `json:"row_count"`
		TotalRows int              `json:"total_rows"`
		Truncated bool             `json:"truncated"`
	}
	decode := func(raw json.RawMessage) qres {
		var r qres
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		return r
	}
	r := decode(out.Calls[0].ok(t))
	if r.RowCount != 2 || fmt.Sprint(r.Rows) != "[map[_pid:4101 n:10 rank:0] map[_pid:4102 n:15 rank:1]]" {
		t.Errorf("group by pid: %+v", r)
	}
	r = decode(out.Calls[1].ok(t))
	if r.RowCount != 3 || r.TotalRows != 25 || !r.Truncated {
		t.Errorf("limit: %+v", r)
	}
	if msg := out.Calls[2].toolError(t); !strings.Contains(msg, "read-only") {
		t.Errorf("DELETE: %q", msg)
	}
	if msg := out.Calls[3].toolError(t); !strings.Contains(msg, "no such table") || !strings.Contains(msg, "describe_tables") {
		t.Errorf("unknown table: %q", msg)
	}
	var d struct {
		Tables  qres     `json:"tables"`
		Columns qres     `json:"columns"`
		NoRows  []string `json:"no_rows_on_this_node"`
		Hint    string   `json:"hint"`
	}
	if err := json.Unmarshal(out.Calls[4].ok(t), &d); err != nil {
		t.Fatal(err)
	}
	// Without a table: what a query can read, compact; columns only once
	// a table is named.
	if d.Tables.TotalRows < 5 || d.Tables.Columns[0] != "table" || len(d.Columns.Rows) != 0 || len(d.NoRows) < 10 || d.Hint == "" {
		t.Errorf("describe all: %d tables (%v), %d columns, no rows %v, hint %q", d.Tables.TotalRows, d.Tables.Columns, len(d.Columns.Rows), d.NoRows, d.Hint)
	}
	if err := json.Unmarshal(out.Calls[5].ok(t), &d); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range d.Columns.Rows {
		names = append(names, fmt.Sprint(c["column_name"]))
	}
	if d.Tables.RowCount != 1 || fmt.Sprint(d.Tables.Rows[0]["processes"]) != "2" || !slices.Contains(names, "_pid") || names[0] != "timestamp" {
		t.Errorf("describe comm_collective: %+v columns %v", d.Tables.Rows, names)
	}
	out.Calls[6].ok(t)
	r = decode(out.Calls[7].ok(t))
	if r.RowCount != 1 || r.Rows[0]["kind"] != "flight_recorder" || !strings.HasPrefix(fmt.Sprint(r.Rows[0]["verdict"]), "MISSING_RANKS") {
		t.Errorf("history.diagnoses after analyze_flight_recorder: %+v", r)
	}

	uris := map[string]bool{}
	for _, r := range out.Resources {
		uris[r.URI] = r.MIMEType == "application/json"
	}
	if len(out.Resources) < 20 || !uris["probing://schema/catalog"] || !uris["probing://schema/python/torch_nccl_flight_record"] ||
		!slices.ContainsFunc(out.Templates, func(r e2eResource) bool { return r.URITemplate == "probing://schema/{schema}/{table}" }) {
		t.Errorf("resources: %d listed (%v), templates %+v", len(out.Resources), uris, out.Templates)
	}
	if len(out.Reads) != 4 {
		t.Fatalf("%d reads", len(out.Reads))
	}
	for i, want := range []string{`"table_name":"comm_collective"`, `"column_name":"duration_ms"`, `"column_name":"value","data_type":"F32"`} {
		rd := out.Reads[i]
		if rd.Error != nil || len(rd.Contents) != 1 || rd.Contents[0].MIMEType != "application/json" || !strings.Contains(rd.Contents[0].Text, want) {
			t.Errorf("read %s: want %s in %+v", rd.URI, want, rd)
		}
	}
	if rd := out.Reads[3]; rd.Error == nil || !strings.Contains(rd.Error.Message, "unknown resource URI") {
		t.Errorf("unknown table resource: %+v", rd)
	}
}
