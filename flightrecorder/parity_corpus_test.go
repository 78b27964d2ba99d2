package flightrecorder

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The parity corpus (testdata/parity, made by gen_corpus.py) holds dumps
// and what torch 2.15's fr_trace printed for them. Parity must print the
// same blocks, in the same order, with the same fields.

type corpusBlock struct {
	Kind         string      `json:"kind"`
	Header       string      `json:"header"`
	PGName       *string     `json:"pg_name"`
	Seq          *int64      `json:"collective_seq_id"`
	RecordID     *int64      `json:"record_id"`
	Profiling    *string     `json:"profiling_name"`
	Missing      []int       `json:"missing_ranks"`
	Culprits     []int       `json:"culprit_ranks"`
	ErrorTypes   []string    `json:"error_types"`
	InNumel      *int64      `json:"total_input_numel"`
	OutNumel     *int64      `json:"total_output_numel"`
	InputSizes   [][]int64   `json:"input_sizes"`
	OutputSizes  [][]int64   `json:"output_sizes"`
	WorldSize    *int        `json:"world_size"`
	Expected     []int       `json:"expected_ranks"`
	State        *string     `json:"collective_state"`
	StackTrace   []string    `json:"stack_trace"`
	ErrorDetails []errDetail `json:"errors"`
}

type errDetail struct {
	Rank   int    `json:"rank"`
	Type   string `json:"type"`
	Detail string `json:"detail"`
}

type corpusCase struct {
	Scenario    string        `json:"scenario"`
	Args        []string      `json:"args"`
	Aborted     *string       `json:"aborted"`
	Blocks      []corpusBlock `json:"blocks"`
	Collectives *int          `json:"collectives_count"`
	List        []struct {
		PassCheck bool `json:"pass_check"`
	} `json:"collectives"`
}

func loadCorpus(t *testing.T) map[string][]corpusCase {
	t.Helper()
	files, err := filepath.Glob("testdata/parity/*/expected*.json")
	if err != nil || len(files) < 40 {
		t.Fatalf("parity corpus missing (%d files): run gen_corpus.py", len(files))
	}
	out := map[string][]corpusCase{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c corpusCase
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Dir(f)] = append(out[filepath.Dir(f)], c)
	}
	return out
}

// comparable blocks: fr_trace's backend warnings are log noise we report in
// data_quality instead.
func corpusKinds(bs []corpusBlock) []corpusBlock {
	var out []corpusBlock
	for _, b := range bs {
		if b.Kind != "UNRECOGNIZED_BACKEND" {
			out = append(out, b)
		}
	}
	return out
}

func TestParityCorpus(t *testing.T) {
	for dir, cases := range loadCorpus(t) {
		l, err := Load([]string{dir}, LoadOptions{Prefix: "nccl_trace_rank_"})
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, c := range cases {
			t.Run(c.Scenario+strings.Join(c.Args, ""), func(t *testing.T) {
				opt := ParityOptions{AllowIncompleteRanks: slices.Contains(c.Args, "--allow-incomplete-ranks")}
				got := Parity(l.Dumps, opt)
				if c.Aborted != nil {
					if got.Aborted != *c.Aborted {
						t.Errorf("aborted %q, want %q", got.Aborted, *c.Aborted)
					}
				} else if got.Aborted != "" {
					t.Fatalf("aborted %q, fr_trace did not", got.Aborted)
				}
				want := corpusKinds(c.Blocks)
				var blocks []Block
				for _, b := range got.Blocks {
					if b.Kind != BlockAbort {
						blocks = append(blocks, b)
					}
				}
				wantN := len(want)
				if c.Aborted != nil && wantN > 0 && want[wantN-1].Kind == "ABORT" {
					wantN--
				}
				if len(blocks) != wantN {
					t.Fatalf("%d blocks, fr_trace printed %d:\n got %s\nwant %s", len(blocks), wantN, kinds(blocks), corpusKindNames(want[:wantN]))
				}
				for i := range blocks {
					compareBlock(t, i, &blocks[i], &want[i])
				}
				if c.Collectives != nil && got.Collectives != *c.Collectives {
					t.Errorf("%d collectives, fr_trace built %d", got.Collectives, *c.Collectives)
				}
				if c.Collectives != nil && len(c.List) == *c.Collectives { // big cases list only a sample
					passed := 0
					for _, col := range c.List {
						if col.PassCheck {
							passed++
						}
					}
					if got.Passed != passed {
						t.Errorf("%d pass_check collectives, fr_trace %d", got.Passed, passed)
					}
				}
			})
		}
	}
}

func kinds(bs []Block) string {
	var s []string
	for _, b := range bs {
		s = append(s, b.Kind)
	}
	return strings.Join(s, ",")
}

func corpusKindNames(bs []corpusBlock) string {
	var s []string
	for _, b := range bs {
		s = append(s, b.Kind)
	}
	return strings.Join(s, ",")
}

func compareBlock(t *testing.T, i int, got *Block, want *corpusBlock) {
	t.Helper()
	prefix := fmt.Sprintf("block %d (%s)", i, want.Kind)
	if got.Kind != want.Kind {
		t.Errorf("%s: kind %s", prefix, got.Kind)
		return
	}
	hdr := strings.TrimPrefix(want.Header, "ABORT: ")
	if got.Header != hdr && !(got.Kind == BlockP2PMismatch || got.Kind == BlockCoalescedP2POK) {
		t.Errorf("%s: header %q, want %q", prefix, got.Header, hdr)
	}
	if !got.IsProblem() || got.Kind == BlockP2PMismatch {
		return
	}
	if want.Seq != nil && got.Seq != *want.Seq {
		t.Errorf("%s: seq %d, want %d", prefix, got.Seq, *want.Seq)
	}
	if want.RecordID != nil && got.RecordID != *want.RecordID {
		t.Errorf("%s: record id %d, want %d", prefix, got.RecordID, *want.RecordID)
	}
	if want.Profiling != nil && got.ProfilingName != *want.Profiling {
		t.Errorf("%s: profiling name %q, want %q", prefix, got.ProfilingName, *want.Profiling)
	}
	if want.Missing != nil && !slices.Equal(got.MissingRanks, sortedCopy(want.Missing)) {
		t.Errorf("%s: missing %v, want %v", prefix, got.MissingRanks, want.Missing)
	}
	if want.Culprits != nil && !slices.Equal(got.Culprits(), sortedCopy(want.Culprits)) {
		t.Errorf("%s: culprits %v, want %v", prefix, got.Culprits(), want.Culprits)
	}
	for _, wd := range want.ErrorDetails {
		found := false
		for _, e := range got.Errors {
			if e.Rank == wd.Rank && e.State.String() == wd.Type && e.Detail == wd.Detail {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no error for rank %d %s %q; got %+v", prefix, wd.Rank, wd.Type, wd.Detail, got.Errors)
		}
	}
	if want.InNumel != nil && (got.InputNumel != *want.InNumel || got.OutputNumel != *want.OutNumel) {
		t.Errorf("%s: numel %d/%d, want %d/%d", prefix, got.InputNumel, got.OutputNumel, *want.InNumel, *want.OutNumel)
	}
	if want.InputSizes != nil && pyList(got.InputSizes) != pyList(want.InputSizes) {
		t.Errorf("%s: input sizes %s, want %s", prefix, pyList(got.InputSizes), pyList(want.InputSizes))
	}
	if want.WorldSize != nil && len(got.ExpectedRanks) != *want.WorldSize {
		t.Errorf("%s: world size %d, want %d", prefix, len(got.ExpectedRanks), *want.WorldSize)
	}
	if want.State != nil && got.State != *want.State {
		t.Errorf("%s: state %q, want %q", prefix, got.State, *want.State)
	}
	var frames []string
	for _, f := range got.Frames {
		frames = append(frames, f.String())
	}
	if want.StackTrace != nil && !slices.Equal(frames, want.StackTrace) && !(len(frames) == 0 && len(want.StackTrace) == 1 && want.StackTrace[0] == "") {
		t.Errorf("%s: stack %q, want %q", prefix, frames, want.StackTrace)
	}
}

func sortedCopy(s []int) []int {
	c := slices.Clone(s)
	sort.Ints(c)
	return c
}
