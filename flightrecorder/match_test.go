package flightrecorder

import "testing"

// The match cases of PyTorch's test_fr_analysis.py (reference §6.1): an
// event helper with process group ("0", "default"), dtypes given as a bare
// string, and a two-rank group.
func ev(name string, in, out [][]int64, state string, outDtype string) *Entry {
	e := &Entry{Shared: &Shared{ProfilingName: "nccl:" + name, State: state, PGName: "0", PGDesc: "default",
		Tensors: &Tensors{InputSizes: in, OutputSizes: out, InputDtypes: []string{"float32"}, OutputDtypes: []string{outDtype}}}}
	e.Op = ParseOpName(e.ProfilingName)
	e.opBad = e.Op.Err != ""
	if outDtype == "" {
		e.OutputDtypes = nil
	}
	return e
}

func sz(dims ...int64) [][]int64 { return [][]int64{dims} }

func TestMatchCases(t *testing.T) {
	e1 := ev("all_reduce", sz(4, 4), sz(4, 4), "scheduled", "float32")
	e9 := ev("all_reduce", sz(4, 4), sz(4, 4), "completed", "float32")
	e10 := ev("all_reduce", sz(4, 4), sz(4, 4), "completed", "float16")
	e11 := ev("gather", sz(4, 4), [][]int64{{4, 4}, {4, 4}}, "completed", "float32")
	e12 := ev("gather", sz(4, 4), [][]int64{{}}, "completed", "")
	e13 := ev("gather", sz(4, 4), sz(4, 4), "completed", "")
	cases := []struct {
		a, b *Entry
		want MatchState
	}{
		{e1, e1, FullyMatched},
		{e1, ev("all_gather", sz(4, 4), sz(4, 4), "scheduled", "float32"), CollectiveTypeMismatch},
		{ev("all_to_all", sz(4, 4), sz(4, 4), "scheduled", "float32"), ev("all_to_all", sz(4, 4), sz(4, 4), "scheduled", "float32"), Undecided},
		{e1, ev("all_reduce", sz(5, 4), sz(4, 4), "scheduled", "float32"), SizeOrSyntaxMismatch},
		{e1, ev("all_reduce", sz(4, 4), sz(5, 4), "scheduled", "float32"), SizeOrSyntaxMismatch},
		{ev("all_reduce", sz(4, 4), sz(5, 4), "scheduled", "float32"), ev("all_reduce", sz(4, 4), sz(5, 4), "scheduled", "float32"), SizeOrSyntaxMismatch},
		{e1, e9, CollectiveStateMismatch},
		{e10, e9, CollectiveDtypeMismatch},
		{e11, e12, FullyMatched},
		{e11, e13, FullyMatched},
	}
	for i, c := range cases {
		if got := Match(c.a, c.b, 2).State; got != c.want {
			t.Errorf("case %d: %v, want %v", i, got, c.want)
		}
	}
	// Every collective against itself.
	for name := range collectives {
		out := sz(4, 4)
		switch name {
		case "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced":
			out = sz(8)
		case "all_gather", "_all_gather_base", "all_gather_into_tensor_coalesced":
			out = sz(32)
		}
		a := ev(name, sz(4, 4), out, "completed", "float32")
		want := FullyMatched
		if unevenCollectives[name] {
			want = Undecided
		}
		if got := Match(a, a, 2).State; got != want {
			t.Errorf("%s vs itself: %v, want %v", name, got, want)
		}
	}
	if got := (MatchInfo{FullyMatched, "rank 0"}).String(); got != "Error type: FULLY_MATCHED, rank 0" {
		t.Errorf("%q", got)
	}
}

func TestParseOpName(t *testing.T) {
	for _, b := range []string{"nccl", "ncclx", "gloo", "xccl"} {
		if op := ParseOpName(b + ":all_reduce"); op.Type != "all_reduce" || op.Err != "" || !KnownBackends[op.Backend] {
			t.Errorf("%s: %+v", b, op)
		}
	}
	if op := ParseOpName("unknown_backend:all_reduce"); op.Type != "all_reduce" || KnownBackends[op.Backend] {
		t.Errorf("unknown backend: %+v", op)
	}
	if op := ParseOpName("nccl:send 1->2"); op.Src != 1 || op.Dst != 2 {
		t.Errorf("send: %+v", op)
	}
	if op := ParseOpName("nccl:recv 3<-0"); op.Src != 0 || op.Dst != 3 {
		t.Errorf("recv: %+v", op)
	}
	if op := ParseOpName("gloo:recv 3<-?"); op.Src != AnySource || op.Dst != 3 {
		t.Errorf("recv any: %+v", op)
	}
	for _, bad := range []string{"all_reduce", "nccl:send", "nccl:allreduce_sparse", "nccl:recv x<-1"} {
		if op := ParseOpName(bad); op.Err == "" {
			t.Errorf("%q parsed: %+v", bad, op)
		}
	}
	if maj, min, err := ParseVersion("2.10"); err != nil || maj != 2 || min != 10 {
		t.Errorf("2.10: %d %d %v", maj, min, err)
	}
	for _, bad := range []string{"2", "2.1.1", "a.b", ""} {
		if _, _, err := ParseVersion(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestPyFrozensetHash(t *testing.T) {
	// Values printed by CPython 3.11: hash(frozenset(s)).
	for _, c := range []struct {
		ranks []int
		want  int64
	}{
		{[]int{0, 1}, 9000494312501845833},
		{[]int{0}, -2704248722033767810},
		{[]int{1}, -558064481276695278},
		{[]int{0, 1, 2, 3}, 7327027465595056883},
		{[]int{2, 3}, 6563540679455660548},
		{[]int{5, 1000}, 7123720878339395150},
	} {
		if got := pyFrozensetHash(c.ranks); got != c.want {
			t.Errorf("%v: %d, want %d", c.ranks, got, c.want)
		}
	}
}
