package flightrecorder

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
	"github.com/probing-mcp/probing-mcp/flightrecorder/pickle"
)

// FuzzDecode feeds arbitrary bytes to the dump decoder (pickle and JSON):
// no panic, and whatever decodes can be analysed without a panic either.
//
//	go test ./flightrecorder -run '^$' -fuzz FuzzDecode -fuzztime 60s
func FuzzDecode(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/parity/f0*/nccl_trace_rank_0")
	more, _ := filepath.Glob("../testdata/fr/real/*/nccl_trace_rank_1")
	for _, p := range append(seeds, more...) {
		if b, err := os.ReadFile(p); err == nil && len(b) < 64<<10 {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}, "pg_status": {"0": {"last_enqueued_collective": "3"}}, "entries": [{"process_group": ["0", "default_pg"], "collective_seq_id": 1, "profiling_name": "nccl:all_reduce", "input_sizes": [[4]], "output_sizes": [[4]], "state": "completed"}]}`))
	// The attacks of bounds_test.go, small: a rank past the ceiling, empty
	// entries, many groups, entry dicts and rank lists shared through the
	// memo, a file that is not a dump.
	js := func(cfg, entries string) []byte {
		return []byte(`{"version": "2.10", "pg_config": {` + cfg + `}, "entries": [` + entries + `]}`)
	}
	entry := `{"process_group": ["0", "default_pg"], "collective_seq_id": 1, "profiling_name": "nccl:all_reduce", "input_sizes": [[4]], "state": "completed"}`
	f.Add(js(`"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 100000000]"}`, entry))
	f.Add(js(`"0": {"ranks": "[0, 1]"}`, entry+strings.Repeat(",{}", 64)))
	var groups []string
	for i := 0; i < 64; i++ {
		groups = append(groups, fmt.Sprintf(`"%d":{"ranks":"[0]"}`, i))
	}
	f.Add(js(strings.Join(groups, ","), entry))
	f.Add([]byte("AWS_SECRET_ACCESS_KEY=x\n"))
	// Ranks 0 and 1 with a group of rank 1 only: fr_trace's replay looped
	// forever on it (found here).
	f.Add(js(`"0": {"name": "0", "desc": "default_pg", "ranks": "[1]"}`, strings.Replace(entry, `{`, `{"record_id": 0, `, 1)))
	w := pickle.NewWriter()
	w.BeginDict()
	w.String("version")
	w.String("2.10")
	w.String("pg_config")
	w.BeginDict()
	for g := 0; g < 4; g++ {
		w.String(fmt.Sprint(g))
		w.BeginDict()
		w.String("ranks")
		w.String("[0, 1, 2, 3]") // one string, memo references after
		w.EndDict()
	}
	w.EndDict()
	w.String("entries")
	w.BeginList()
	w.BeginDict()
	w.String("process_group")
	w.String("0")
	w.String("default_pg")
	w.Tuple2()
	w.String("collective_seq_id")
	w.Int(1)
	w.EndDict()
	id := w.Memo()
	for i := 0; i < 16; i++ {
		w.Get(id) // the same entry dict again
	}
	w.EndList()
	w.EndDict()
	f.Add(w.Finish())
	// Issue 23's attack, small: groups sharing rank lists through the memo
	// (strings and lists of ints, one list and several).
	f.Add(frsynth.SharedGroups(frsynth.SharedSpec{Ranks: 64, Groups: 16, Entries: 2}))
	f.Add(frsynth.SharedGroups(frsynth.SharedSpec{Ranks: 40, Groups: 6, Lists: 3, Ints: true, Stop: 1}))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Decode(data)
		if err != nil {
			return
		}
		d.Rank = 0
		other := *d
		other.Rank = 1
		r := Analyze([]*Dump{d, &other}, Options{Transcript: true})
		if r.Verdict == "" {
			t.Fatal("no verdict")
		}
		// Rendered, both ways, within their bounds.
		for _, o := range []ViewOptions{{}, {Full: true}, TerminalView(true)} {
			if r.View(o).Text() == "" {
				t.Fatal("no text")
			}
		}
		if _, err := json.Marshal(r.Bounded()); err != nil {
			t.Fatal(err)
		}
	})
}
