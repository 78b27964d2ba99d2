package redteam

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
)

// TestFlightRecorderMemoPickle. Attack: a 7.9 MB Flight Recorder pickle
// whose 16 process groups share one memoised list of a million ranks,
// handed to analyze_flight_recorder (a dump in an allowed directory) and
// to `probing-mcp analyze`. Before (b2aa69a): 33 s and 3.8 GB, 134 MB of
// text, and --max-memory 1GiB did not stop it (a 41 MB variant was killed
// by the kernel at 6 GiB). Bound: every share of the list is charged
// (PROBING_FR_MAX_MEMBERSHIPS): refused with a clear message, or, with the
// ceiling raised, a bounded answer; under 512 MB and 40 s.
func TestFlightRecorderMemoPickle(t *testing.T) {
	dir := t.TempDir()
	data := frsynth.SharedGroups(frsynth.SharedSpec{Ranks: 1_000_000, Groups: 16})
	if err := os.WriteFile(filepath.Join(dir, "nccl_trace_rank_0"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("the dump: %.1f MB", float64(len(data))/1e6)
	const limit = 40 * time.Second
	t.Run("tool", func(t *testing.T) {
		c := serveStdio(t, env(t, t.TempDir(), "PROBING_ALLOWED_FILE_DIRS="+dir))
		r := c.call("analyze_flight_recorder", map[string]any{"paths": []string{dir}}, limit)
		c.close()
		mustContain(t, "analyze_flight_recorder", r.Text, "16 groups name 16000000 members in all", fr.EnvMaxMemberships)
		if len(r.Text) > 64<<10 {
			t.Errorf("%d bytes of text", len(r.Text))
		}
		bounded(t, "7.9 MB memo-shared pickle, analyze_flight_recorder", c.p, r.Took, limit)
	})
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"cli", nil, nil, "16 groups name 16000000 members in all"},
		{"cli_raised", []string{fr.EnvMaxMemberships + "=33554432"}, nil, "no dump from rank(s) 1-999999"}, // the tools' wording (one renderer)
		{"cli_raised_ceiling", []string{fr.EnvMaxMemberships + "=33554432"}, []string{"--max-memory", "40MiB"}, "over the memory ceiling of 40.0 MiB (as asked)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newProc(t, env(t, t.TempDir(), c.env...), append([]string{"analyze", dir}, c.args...)...)
			p.cmd.Stdout = p.stdout
			p.launch()
			p.wait(limit)
			out := p.stdout.String() + p.stderr.String()
			mustContain(t, "analyze", out, c.want)
			if len(out) > 1<<20 {
				t.Errorf("%d bytes of output", len(out))
			}
			bounded(t, fmt.Sprintf("7.9 MB memo-shared pickle, analyze (%s)", c.name), p, p.took, limit)
		})
	}
}
