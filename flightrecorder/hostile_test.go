package flightrecorder_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
)

// Issue 23's hostile dumps: process groups that share one huge rank list
// through the pickle memo. The 7.9 MB one (16 groups, one list of a
// million ranks) took 33 s and 3.8 GB and wrote 134 MB of text; a 41 MB
// one (five lists of 2^20 ranks) was killed by the kernel at 6 GiB. Each
// now ends, with an answer or a clear error, under 512 MB: load, analysis
// and both renderings run in a child process (this test binary again),
// which reports its own peak resident memory (VmHWM). The child's rusage
// would not do: a child that exec's from a vfork of this process starts
// with this process's peak as its own.

const (
	childDirEnv       = "FR_CHILD_DUMPS" // the child's input directory; unset: no child
	childOutEnv       = "FR_CHILD_OUT"   // where it writes report.txt, report.json or error.txt
	peakLimit   int64 = 512 << 20
)

// TestChildAnalyze is the child: what `probing-mcp analyze DIR` and
// `analyze DIR --json` do, through the package's API.
func TestChildAnalyze(t *testing.T) {
	dir, out := os.Getenv(childDirEnv), os.Getenv(childOutEnv)
	if dir == "" {
		t.Skip("the child of TestHostileSharedRankLists and TestLargeSharedGroups")
	}
	write := func(name string, render func(io.Writer) error) {
		f, err := os.Create(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := fr.RenderGuarded(context.Background(), fr.Limits{}, f, render); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		// The peak, last: VmHWM is this process's high-water mark.
		status, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				os.WriteFile(filepath.Join(out, "peak.txt"), []byte(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))), 0o644)
			}
		}
	}()
	l, err := fr.LoadContext(context.Background(), []string{dir}, fr.LoadOptions{})
	if err != nil {
		if err := os.WriteFile(filepath.Join(out, "error.txt"), []byte(err.Error()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	rep, err := fr.AnalyzeLoadedContext(context.Background(), l, fr.Options{Transcript: true})
	if err != nil {
		t.Fatal(err)
	}
	write("report.txt", func(w io.Writer) error {
		_, err := io.WriteString(w, rep.View(fr.TerminalView(true)).Text())
		return err
	})
	write("report.json", func(w io.Writer) error { return json.NewEncoder(w).Encode(rep.Bounded()) })
}

// childResult is what the child left, and its peak memory.
type childResult struct {
	peak        int64
	text, error string
	json        *fr.Report
	jsonBytes   int
}

// runChild analyses dir in a child process with env added, and fails the
// test past peakLimit or a generous deadline.
func runChild(t *testing.T, dir string, env ...string) childResult {
	t.Helper()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestChildAnalyze$", "-test.count=1")
	cmd.Env = append(os.Environ(), append(env, childDirEnv+"="+dir, childOutEnv+"="+out)...)
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v (after %s)\n%s", err, time.Since(start).Round(time.Millisecond), b)
	}
	var r childResult
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(out, name))
		return string(b)
	}
	kb, err := strconv.ParseInt(read("peak.txt"), 10, 64)
	if err != nil {
		t.Skipf("no peak from the child (no /proc/self/status VmHWM?): %v", err)
	}
	r.peak = kb << 10
	r.text, r.error = read("report.txt"), read("error.txt")
	if js := read("report.json"); js != "" {
		r.jsonBytes = len(js)
		r.json = &fr.Report{}
		if err := json.Unmarshal([]byte(js), r.json); err != nil {
			t.Fatalf("report.json: %v", err)
		}
	}
	t.Logf("%s; peak %d MiB, text %d bytes, JSON %d bytes", time.Since(start).Round(time.Millisecond), r.peak>>20, len(r.text), r.jsonBytes)
	if limit := peakLimit * raceScale; r.peak > limit {
		t.Errorf("peak resident memory %d MiB, over %d MiB", r.peak>>20, limit>>20)
	}
	return r
}

func writeDump(t *testing.T, dir string, rank int, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("nccl_trace_rank_%d", rank)), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestHostileSharedRankLists(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 50 MB of dumps and analyses them in child processes")
	}
	small := frsynth.SharedSpec{Ranks: 1_000_000, Groups: 16}         // 7.9 MB
	large := frsynth.SharedSpec{Ranks: 1 << 20, Groups: 16, Lists: 5} // 41 MB
	for _, c := range []struct {
		name   string
		spec   frsynth.SharedSpec
		memb   string // PROBING_FR_MAX_MEMBERSHIPS; "" the default
		want   string // in the error, or (ceiling raised) the text
		absent string // ranks of the million past rank 0
	}{
		{"7.9MB", small, "", "16 groups name 16000000 members in all", ""},
		{"41MB", large, "", "16 groups name 16777216 members in all", ""},
		// With the ceiling raised the groups are analysed, and the shared
		// lists cost one member set each, not one per group.
		{"7.9MB/raised", small, "33554432", "no dump from ranks 1-999999", "1-999999"},
		{"41MB/raised", large, "33554432", "no dump from ranks 1-1048575", "1-1048575"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			data := frsynth.SharedGroups(c.spec)
			writeDump(t, dir, 0, data)
			var env []string
			if c.memb != "" {
				env = append(env, fr.EnvMaxMemberships+"="+c.memb)
			}
			r := runChild(t, dir, env...)
			if c.memb == "" {
				if !strings.Contains(r.error, c.want) || !strings.Contains(r.error, fr.EnvMaxMemberships) {
					t.Fatalf("want the membership ceiling named; error %q", r.error)
				}
				return
			}
			if r.error != "" || r.json == nil {
				t.Fatalf("error %q", r.error)
			}
			// Rendered bounded: 16 groups of a million ranks without a dump
			// were 134 MB of text and 2 GB of JSON.
			if len(r.text) > 256<<10 || r.jsonBytes > 2<<20 || !strings.Contains(r.text, c.want) {
				t.Errorf("text %d bytes, JSON %d bytes:\n%.2000s", len(r.text), r.jsonBytes, r.text)
			}
			rep := r.json
			if len(rep.ProcessGroups) != 16 || rep.Verdict != "UNDECIDED" || !rep.Truncated || rep.Ranks.MissingText != c.absent {
				t.Fatalf("%d groups, verdict %s, truncated %v, missing %q", len(rep.ProcessGroups), rep.Verdict, rep.Truncated, rep.Ranks.MissingText)
			}
			for _, pr := range rep.ProcessGroups {
				if pr.MissingDumpsText != c.absent || len(pr.MissingDumps) != 1024 || pr.MembersText != "0-"+strings.TrimPrefix(c.absent, "1-") {
					t.Errorf("pg %s: ranks %q, missing %q (%d listed)", pr.PGName, pr.MembersText, pr.MissingDumpsText, len(pr.MissingDumps))
				}
			}
			if !strings.Contains(rep.FRTrace.Skipped, "not run") || !strings.Contains(rep.FRTrace.Aborted, "Missing dump files") {
				t.Errorf("fr_trace: aborted %.200q, skipped %q", rep.FRTrace.Aborted, rep.FRTrace.Skipped)
			}
		})
	}
}

// TestLargeSharedGroups: a legitimate job whose groups share one rank list
// through the memo still gets its answer. With every member's dump (64
// ranks, 8 groups), rank 5 never joined #3 and is named in every group;
// at the largest world the ceilings allow (8 groups of 2^20 ranks, dumps
// from 4 of them), the rank that stopped early leads the lagging ranks
// and the rest are named as ranges, under the memory bound.
func TestLargeSharedGroups(t *testing.T) {
	dir := t.TempDir()
	for r := 0; r < 64; r++ {
		spec := frsynth.SharedSpec{Ranks: 64, Groups: 8, Entries: 3}
		if r == 5 {
			spec.Stop = 2
		}
		writeDump(t, dir, r, frsynth.SharedGroups(spec))
	}
	l, err := fr.Load([]string{dir}, fr.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep := fr.AnalyzeLoaded(l, fr.Options{})
	if len(rep.ProcessGroups) != 8 {
		t.Fatalf("%d groups: %s", len(rep.ProcessGroups), rep.Summary)
	}
	for _, pr := range rep.ProcessGroups {
		if pr.Verdict != fr.VerdictMissingRanks || fmt.Sprint(pr.CulpritRanks) != "[5]" || pr.CollectiveSeqID != 3 || pr.FRTrace == nil || !pr.FRTrace.Agrees {
			t.Errorf("pg %s: %s at #%d, culprits %v, fr_trace %+v: %s", pr.PGName, pr.Verdict, pr.CollectiveSeqID, pr.CulpritRanks, pr.FRTrace, pr.Finding.Line)
		}
	}
	if testing.Short() {
		return
	}
	big := t.TempDir()
	for r := 0; r < 4; r++ {
		spec := frsynth.SharedSpec{Ranks: 1 << 20, Groups: 8, Entries: 3} // 8 x 2^20: the default membership ceiling
		if r == 3 {
			spec.Stop = 2
		}
		writeDump(t, big, r, frsynth.SharedGroups(spec))
	}
	c := runChild(t, big)
	if c.error != "" || c.json == nil {
		t.Fatalf("error %q", c.error)
	}
	if len(c.json.ProcessGroups) != 8 {
		t.Fatalf("%d groups", len(c.json.ProcessGroups))
	}
	for _, pr := range c.json.ProcessGroups {
		if pr.MissingDumpsText != "4-1048575" || pr.Size != 1<<20 || len(pr.LaggingRanks) == 0 || pr.LaggingRanks[0].Rank != 3 {
			t.Errorf("pg %s: size %d, missing %q, lagging %+v: %s", pr.PGName, pr.Size, pr.MissingDumpsText, pr.LaggingRanks, pr.Finding.Line)
		}
	}
}

// TestMembershipCeilings: the ceiling holds for one dump's groups (a list
// shared through the memo charged per group), for the distinct groups of
// an analysis (a list named under a new name in each dump: every dump
// passes alone, the analysis takes them in rank order while they fit),
// and a rank list longer than the world is refused before it is parsed.
func TestMembershipCeilings(t *testing.T) {
	t.Setenv(fr.EnvMaxMemberships, "100")
	if _, err := fr.Decode(frsynth.SharedGroups(frsynth.SharedSpec{Ranks: 40, Groups: 3})); err == nil ||
		!strings.Contains(err.Error(), "its 3 groups name 120 members in all") {
		t.Errorf("3 groups sharing a list of 40: %v", err)
	}
	var dumps []*fr.Dump
	for r := 0; r < 4; r++ {
		cfg := fmt.Sprintf(`"0": {"name": "0", "desc": "default_pg", "ranks": "[%s]"}, "g%d": {"name": "g%d", "desc": "mine", "ranks": "[%s]"}`,
			rangeList(40), r, r, rangeList(40))
		d, err := fr.Decode([]byte(`{"version": "2.10", "pg_config": {` + cfg + `}, "entries": [` + goodEntry + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		d.Rank, d.Path = r, fmt.Sprintf("nccl_trace_rank_%d", r)
		dumps = append(dumps, d)
	}
	rep := fr.Analyze(dumps, fr.Options{})
	if fmt.Sprint(rep.Ranks.Dumped) != "[0]" || len(rep.DataQuality.Files) != 3 ||
		!strings.Contains(rep.DataQuality.Files[0].Problem, "would name 120 members in all, over the ceiling of 100 memberships") {
		t.Errorf("dumped %v, problems %+v", rep.Ranks.Dumped, rep.DataQuality.Files)
	}
	t.Setenv(fr.EnvMaxRanks, "8")
	if _, err := fr.Decode(jsonDump("[0, 0, 0, 0, 0, 0, 0, 0, 0]", goodEntry)); err == nil || !strings.Contains(err.Error(), "a list of 9 items, more than the ceiling of 8 ranks") {
		t.Errorf("a list of 9 under a world of 8: %v", err)
	}
}
