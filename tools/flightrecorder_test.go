package tools

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
)

// TestAnalyzeFlightRecorderFollowsTheRequest: the analysis runs under the
// request's context, so a request that ended (an HTTP deadline, a client
// that gave up) stops it instead of letting it run on and hold memory.
func TestAnalyzeFlightRecorderFollowsTheRequest(t *testing.T) {
	dir := t.TempDir()
	if err := frsynth.Write(dir, frsynth.Spec{Ranks: 4, Entries: 50, Fault: frsynth.Fault{Kind: "missing", Rank: 2, Seq: 40}}); err != nil {
		t.Fatal(err)
	}
	files, err := NewFilePolicy(func(k string) string {
		if k == "PROBING_ALLOWED_FILE_DIRS" {
			return dir
		}
		return ""
	}, dir, dir)
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{Files: files, MaxFileBytes: 64 << 20}
	p := AnalyzeFlightRecorderParams{Paths: []string{dir}}
	res, err := runAnalyzeFlightRecorder(context.Background(), env, p)
	if err != nil || res.Verdict != "MISSING_RANKS" {
		t.Fatalf("verdict %q, %v", res.Verdict, err)
	}
	// A filter that matches nothing is the caller's mistake, not an OK.
	_, err = runAnalyzeFlightRecorder(context.Background(), env, AnalyzeFlightRecorderParams{Paths: []string{dir}, PG: "nosuch"})
	var nm *UserError
	if !errors.As(err, &nm) || !strings.Contains(err.Error(), `no process group matches pg "nosuch"`) {
		t.Errorf("pg nosuch: %v", err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("request deadline exceeded"))
	_, err = runAnalyzeFlightRecorder(ctx, env, p)
	var ue *UserError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "stopped before it finished (request deadline exceeded)") {
		t.Errorf("ended request: %v", err)
	}
}
