package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestAnalyzeJSON(t *testing.T) {
	code, out, errOut := runCLI("analyze", "../../testdata/fr/real/op_mismatch", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Verdict       string `json:"verdict"`
		ProcessGroups []struct {
			PGName          string `json:"pg_name"`
			Verdict         string `json:"verdict"`
			CollectiveSeqID int64  `json:"collective_seq_id"`
			ProfilingName   string `json:"profiling_name"`
			MissingRanks    []int  `json:"missing_ranks"`
			CulpritRanks    []int  `json:"culprit_ranks"`
			LaggingRanks    []any  `json:"lagging_ranks"`
		} `json:"process_groups"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	pg := rep.ProcessGroups[0]
	if rep.Verdict != "COLLECTIVE_TYPE_MISMATCH" || pg.PGName != "0" || pg.CollectiveSeqID != 5 || pg.ProfilingName != "gloo:all_reduce" ||
		len(pg.CulpritRanks) != 1 || pg.CulpritRanks[0] != 1 || pg.MissingRanks == nil || pg.LaggingRanks == nil {
		t.Errorf("%+v", rep)
	}
}

func TestAnalyzeText(t *testing.T) {
	code, out, _ := runCLI("analyze", "--prefix", "nccl_trace_rank_", "../../testdata/fr/real/missing_rank", "--verbose")
	if code != 0 || !strings.Contains(out, "Verdict MISSING_RANKS") || !strings.Contains(out, "rank 2 completed #4 and never enqueued #5") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

func TestExitCodes(t *testing.T) {
	empty := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"analyze", empty}, 1, "no files found"},
		{[]string{"analyze"}, 2, "no PATH"},
		{[]string{"analyze", empty, "--ranks", "x"}, 2, "--ranks"},
		{[]string{"analyze", empty, "--max-file-size", "big"}, 2, "max file size"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{nil, 2, "Usage"},
	} {
		code, _, errOut := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("%v: exit %d %q, want %d %q", tc.args, code, errOut, tc.code, tc.msg)
		}
	}
	if code, out, _ := runCLI("version"); code != 0 || !strings.HasPrefix(out, "probing-mcp ") {
		t.Errorf("version: %d %q", code, out)
	}
}

// TestQueryBounds: the CLI's query runs under the same bounds as the
// server's (a value bomb fails at once), and a bad bound is a usage error.
func TestQueryBounds(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := runCLI("query", "--data-dir", dir, "SELECT length(randomblob(999999999))")
	if code != 1 || !strings.Contains(errOut, "PROBING_MCP_QUERY_MAX_VALUE") {
		t.Errorf("randomblob bomb: exit %d %q", code, errOut)
	}
	t.Setenv("PROBING_MCP_QUERY_MEMORY", "lots")
	if code, _, errOut := runCLI("query", "--data-dir", dir, "SELECT 1"); code != 2 || !strings.Contains(errOut, "PROBING_MCP_QUERY_MEMORY") {
		t.Errorf("bad memory cap: exit %d %q", code, errOut)
	}
}
