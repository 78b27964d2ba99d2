package traceexport

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
)

// traceProcessor is Perfetto's trace_processor_shell, when this machine
// has one: PROBING_TRACE_PROCESSOR names it, else PATH. The PyPI package
// (pip install perfetto) fetches the binary from Google's storage on
// first use, which a machine without that network cannot do, so the
// tests do not install it.
func traceProcessor(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROBING_TRACE_PROCESSOR"); p != "" {
		return p
	}
	for _, n := range []string{"trace_processor_shell", "trace_processor"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Skip("no Perfetto trace_processor_shell: set PROBING_TRACE_PROCESSOR to one (https://get.perfetto.dev/trace_processor, " +
		"or the binary `pip install perfetto` downloads on first use into ~/.local/share/perfetto/prebuilts)")
	return ""
}

// TestTraceProcessorLoads: Perfetto's own importer reads the trace of the
// shipped dumps: a thread per rank named for it, the calls still
// running as slices, the never-entered mark.
func TestTraceProcessorLoads(t *testing.T) {
	tp := traceProcessor(t)
	l, err := fr.LoadContext(context.Background(), []string{"../testdata/fr/real/missing_rank"}, fr.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	calls, last := FromFlightRecorder(l)
	_, _, raw := write(t, calls, Options{Ranks: []int{0, 1, 2, 3}, ReadUS: last, Source: "flight_recorder"})
	dir := t.TempDir()
	file := filepath.Join(dir, "trace.json")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]string{
		"select count(*) as n from thread where name like 'rank %'":         "4",
		"select count(*) as n from slice where name like '%(still inside)'": "4",
		"select count(*) as n from slice where name like 'never entered%'":  "1",
	} {
		qf := filepath.Join(dir, "q.sql")
		if err := os.WriteFile(qf, []byte(q+";\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := exec.CommandContext(ctx, tp, "-q", qf, file).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", q, err, out)
		}
		lines := strings.Fields(string(out))
		if len(lines) == 0 || lines[len(lines)-1] != want {
			t.Errorf("%s: want %s, got:\n%s", q, want, out)
		}
	}
}
