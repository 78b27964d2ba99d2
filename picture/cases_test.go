package picture

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// pageCase is one page the tests draw: what it must show.
type pageCase struct {
	name string
	page func(t testing.TB) Page
	// culprit: the graph has a highlighted culprit node; says: text the
	// page must contain.
	culprit bool
	says    []string
}

// hostile is job text that must come out escaped and clipped.
var hostile = `<script>alert("x")</script><img src=x onerror=alert(1)>` + strings.Repeat("A", 20<<10)

// stalledJob is n ranks doing rounds of all_reduce on the whole group;
// in the last round every rank but culprit entered it, and culprit sits
// in its own code. Names: the op, the group's function and the culprit's
// frame (hostile ones in the hostile case).
func stalledJob(n, culprit int, op, fn string) diagnosis.Input {
	in := diagnosis.Input{World: n, Ranks: map[int]*diagnosis.RankFacts{}}
	all := make([]string, n)
	for r := range all {
		all[r] = fmt.Sprint(r)
	}
	grp := "[" + strings.Join(all, ", ") + "]"
	base := int64(1_700_000_000_000_000) // µs
	var last int64
	for r := 0; r < n; r++ {
		ts := base
		for s := int64(1); s <= 6; s++ {
			ts += 500_000
			if s == 6 && r == culprit {
				break
			}
			dur := 2.0
			if s == 6 {
				dur = -1
			}
			in.Comm = append(in.Comm, evidence.CommRow{Rank: r, TimestampUS: ts, Op: op, Ranks: grp, GroupSeq: s, DurationMS: dur, Peer: -1})
		}
		last = max(last, ts)
		main := &stacks.Thread{IsMain: true, Name: "MainThread", Frames: []stacks.Frame{
			{File: "/venv/torch/distributed/distributed_c10d.py", Line: 2501, Function: "all_reduce"},
			{File: "/job/train.py", Line: 88, Function: "step"},
			{File: "/job/train.py", Line: 120, Function: "main"},
		}}
		if r == culprit {
			main.Frames = []stacks.Frame{
				{File: "/job/" + fn + ".py", Line: 42, Function: fn},
				{File: "/job/train.py", Line: 80, Function: "step"},
				{File: "/job/train.py", Line: 120, Function: "main"},
			}
		}
		in.Ranks[r] = &diagnosis.RankFacts{Rank: r, PID: 1000 + r, Alive: true, Main: main, Threads: []stacks.Thread{*main}, StackSource: "agent", LocalRank: r}
	}
	now := last*1000 + int64(5*time.Minute)
	for _, f := range in.Ranks {
		f.NowNS = now
		a := evidence.RankActivity{Rank: f.Rank, LastComm: last, LastCommDone: last - 500_000}
		f.Activity = &a
	}
	in.State = diagnosis.StateOptions{MinStall: time.Second}
	return in
}

func diagnosed(in diagnosis.Input) Page {
	rep := diagnosis.Diagnose(in)
	return FromDiagnosis(&rep)
}

// capture is a bundle the evidence service gathered from a real hang
// (diagnosis/testdata/captures).
func capture(t testing.TB, name string) Page {
	data, err := os.ReadFile(filepath.Join("..", "diagnosis", "testdata", "captures", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var b evidence.Bundle
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatal(err)
	}
	return diagnosed(diagnosis.FromBundle(&b, diagnosis.StateOptions{MinStall: time.Second}))
}

// analyzed is the page of a Flight Recorder dump set.
func analyzed(t testing.TB, dir string) Page {
	l, err := fr.Load([]string{dir}, fr.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return FromFlightRecorder(fr.AnalyzeLoaded(l, fr.Options{}))
}

func realFR(name string) string { return filepath.Join("..", "testdata", "fr", "real", name) }

// hostileFR is the real missing_rank dump set (JSON) with the group's
// name and description, the op and every frame made hostile: markup and
// 20 KB strings.
func hostileFR(t testing.TB) string {
	src := realFR("missing_rank_json")
	dir := t.(interface{ TempDir() string }).TempDir()
	names, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(src, n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var d map[string]any
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		for _, e := range d["entries"].([]any) {
			e := e.(map[string]any)
			e["process_group"] = []any{hostile, hostile}
			e["frames"] = []any{map[string]any{"name": hostile, "filename": "/job/" + hostile + ".py", "line": 7}}
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n.Name()), out, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// synthFR writes a synthetic job's dumps (frsynth) once per test binary.
func synthFR(t testing.TB, spec frsynth.Spec) string {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("picture-frsynth-%d-%d-%s-%d-%d", os.Getpid(), spec.Ranks, spec.Fault.Kind, spec.Fault.Rank, spec.TP))
	if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
		return dir
	}
	if err := frsynth.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// recorded is the page of v as the history keeps it: its JSON.
func recorded(t testing.TB, kind string, v any) Page {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p, err := FromRecorded(kind, b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// realRings is the verdict on the rings a real 8-rank torch gloo job left
// (testdata/jobs/real), read as if live two minutes after its last row,
// as diagnosis' TestRealGlooJobs reads them.
func realRings(t testing.TB, name string) Page {
	dir := filepath.Join("..", "testdata", "jobs", "real", name)
	e, err := sqlengine.New(sqlengine.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rows, err := evidence.ReadComm(ctx, e, 64)
	if err != nil || len(rows) == 0 {
		t.Fatalf("comm rows: %d, %v", len(rows), err)
	}
	acts, err := evidence.ReadActivity(ctx, e, 10)
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, a := range acts {
		last = max(last, a.LastComm, a.LastCommDone)
	}
	in := diagnosis.Input{World: 8, Ranks: map[int]*diagnosis.RankFacts{}, Comm: rows}
	for r := 0; r < 8; r++ {
		in.Ranks[r] = &diagnosis.RankFacts{Rank: r, Alive: true, Activity: acts[r], NowNS: last*1000 + int64(2*time.Minute)}
	}
	return diagnosed(in)
}

func cases() []pageCase {
	return []pageCase{
		{name: "cpu_stall_8", culprit: true, page: func(t testing.TB) Page { return diagnosed(stalledJob(8, 3, "all_reduce", "load_batch")) },
			says: []string{"load_batch", "all_reduce #6"}},
		{name: "hostile_names", culprit: true, page: func(t testing.TB) Page { return diagnosed(stalledJob(8, 5, hostile, hostile)) },
			says: []string{"&lt;script&gt;"}},
		{name: "ranks_4096", culprit: true, page: func(t testing.TB) Page { return diagnosed(stalledJob(4096, 1234, "all_reduce", "load_batch")) },
			says: []string{"1234", "4095 ranks"}},
		{name: "real_gloo_skip_tp", culprit: true, page: func(t testing.TB) Page { return realRings(t, "skip_tp") },
			says: []string{`class="edge cycle"`, ">rank 3<"}},
		{name: "real_gloo_cpu_stall_tp", culprit: true, page: func(t testing.TB) Page { return realRings(t, "cpu_stall_tp") },
			says: []string{">rank 3<"}},
		{name: "capture_deadlock", culprit: true, page: func(t testing.TB) Page { return capture(t, "deadlock") }, says: []string{"update_stats"}},
		{name: "capture_dead_rank", culprit: true, page: func(t testing.TB) Page { return capture(t, "dead_rank") }, says: []string{"dead_rank"}},
		{name: "capture_mismatch", culprit: true, page: func(t testing.TB) Page { return capture(t, "mismatch") }, says: []string{"broadcast_params"}},
		{name: "unknown_no_job", page: func(t testing.TB) Page { return diagnosed(diagnosis.Input{}) },
			says: []string{"No rank was found"}},
		{name: "healthy", page: func(t testing.TB) Page {
			in := stalledJob(4, -1, "all_reduce", "x")
			for _, f := range in.Ranks {
				f.NowNS = f.Activity.LastComm*1000 + int64(time.Second)
			}
			for i := range in.Comm {
				in.Comm[i].DurationMS = 2
			}
			return diagnosed(in)
		}, says: []string{"No rank waits for another"}},
		{name: "fr_missing_rank", culprit: true, page: func(t testing.TB) Page { return analyzed(t, realFR("missing_rank")) }},
		{name: "fr_op_mismatch", culprit: true, page: func(t testing.TB) Page { return analyzed(t, realFR("op_mismatch")) }},
		{name: "fr_subgroup_missing", culprit: true, page: func(t testing.TB) Page { return analyzed(t, realFR("subgroup_missing")) }},
		{name: "fr_missing_dumps", culprit: true, page: func(t testing.TB) Page { return analyzed(t, realFR("missing_rank_nodump_pgfix")) },
			says: []string{"No dump from ranks 2", "left no dump"}},
		{name: "fr_hostile_names", culprit: true, page: func(t testing.TB) Page { return analyzed(t, hostileFR(t)) },
			says: []string{"&lt;script&gt;"}},
		{name: "fr_healthy", page: func(t testing.TB) Page { return analyzed(t, realFR("healthy")) }, says: []string{"No rank waits for another"}},
		{name: "recorded_watch", culprit: true, page: func(t testing.TB) Page {
			rep := diagnosis.Diagnose(stalledJob(8, 3, "all_reduce", "load_batch"))
			return recorded(t, "watch", rep)
		}, says: []string{"a recorded verdict", ">rank 3<", "no lanes"}},
		{name: "recorded_flight_recorder", culprit: true, page: func(t testing.TB) Page {
			l, err := fr.Load([]string{realFR("missing_rank")}, fr.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return recorded(t, "flight_recorder", fr.AnalyzeLoaded(l, fr.Options{}).View(fr.ViewOptions{}))
		}, says: []string{"a recorded Flight Recorder answer"}},
		{name: "fr_synth_4096", culprit: true, page: func(t testing.TB) Page {
			return analyzed(t, synthFR(t, frsynth.Spec{Ranks: 4096, Entries: 16, Frames: true, TP: 8, Fault: frsynth.Fault{Kind: "missing", Rank: 1234, Seq: 10}}))
		}, says: []string{"1234"}},
	}
}
