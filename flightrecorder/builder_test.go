package flightrecorder

import (
	"fmt"
	"sort"
	"testing"
)

// scenario builds dumps in memory for unit tests: a default group "0" over
// all ranks, all_reduce [[1024]] Float, completed, unless an option says
// otherwise.
type scenario struct {
	version string
	dumps   map[int]*Dump
	nextRID map[int]int64
	t0      int64
}

func newScenario(version string, world int) *scenario {
	s := &scenario{version: version, dumps: map[int]*Dump{}, nextRID: map[int]int64{}, t0: 1_767_225_600_000_000_000}
	maj, min, _ := ParseVersion(version)
	all := make([]int, world)
	for r := range all {
		all[r] = r
	}
	for r := 0; r < world; r++ {
		s.dumps[r] = &Dump{Rank: r, Version: version, Major: maj, Minor: min, Format: "pickle", HasEntries: true,
			Path: fmt.Sprintf("mem/nccl_trace_rank_%d", r)}
	}
	s.pg("0", "default_pg", all...)
	return s
}

func (s *scenario) pg(name, desc string, ranks ...int) *scenario {
	for _, r := range ranks {
		s.dumps[r].PGConfig = append(s.dumps[r].PGConfig, PGConfig{Name: name, Desc: desc, Ranks: ranks})
	}
	return s
}

type opt func(*Entry)

// own gives e a Tensors of its own before a test option changes it.
func (e *Entry) own() *Tensors {
	t := *e.Tensors
	e.Tensors = &t
	return e.Tensors
}

func in(sizes ...[]int64) opt  { return func(e *Entry) { e.own().InputSizes = sizes } }
func out(sizes ...[]int64) opt { return func(e *Entry) { e.own().OutputSizes = sizes } }
func inout(sizes ...[]int64) opt {
	return func(e *Entry) { e.own().InputSizes, e.OutputSizes = sizes, sizes }
}
func dtypes(in, out string) opt {
	return func(e *Entry) { e.own().InputDtypes, e.OutputDtypes = []string{in}, []string{out} }
}
func state(s string) opt { return func(e *Entry) { e.State = s } }
func onPG(name, desc string) opt {
	return func(e *Entry) { e.PGName, e.PGDesc = name, desc }
}
func p2p(seq int64) opt { return func(e *Entry) { e.IsP2P, e.P2PSeqID = true, seq } }
func retired() opt      { return func(e *Entry) { e.Retired = true } }
func rid(id int64) opt  { return func(e *Entry) { e.RecordID = id } }
func frames(fs ...string) opt {
	return func(e *Entry) {
		for i, f := range fs {
			e.Frames = append(e.Frames, Frame{Name: f, Filename: "train.py", Line: int64(10 + i)})
		}
	}
}

// op appends one entry to rank r.
func (s *scenario) op(r int, name string, seq int64, opts ...opt) *scenario {
	// Each entry has a Shared of its own, so that options may change it.
	e := Entry{RecordID: s.nextRID[r], PGID: 0, CollectiveSeqID: seq, P2PSeqID: 0, OpID: seq, TimeCreatedNs: s.t0 + seq*1_000_000,
		Shared: &Shared{PGName: "0", PGDesc: "default_pg", ProfilingName: name,
			Tensors: &Tensors{InputSizes: [][]int64{{1024}}, OutputSizes: [][]int64{{1024}}, InputDtypes: []string{"Float"},
				OutputDtypes: []string{"Float"}}, State: "completed", TimeoutMs: 600_000}}
	for _, o := range opts {
		o(&e)
	}
	e.Op = ParseOpName(e.ProfilingName)
	e.opBad = e.Op.Err != ""
	s.nextRID[r] = e.RecordID + 1
	s.dumps[r].Entries = append(s.dumps[r].Entries, e)
	return s
}

// seqs appends all_reduce seq lo..hi to each rank.
func (s *scenario) seqs(ranks []int, lo, hi int64, opts ...opt) *scenario {
	for _, r := range ranks {
		for q := lo; q <= hi; q++ {
			s.op(r, "nccl:all_reduce", q, opts...)
		}
	}
	return s
}

func (s *scenario) status(r int, pgid string, enq, started, done int64) *scenario {
	s.dumps[r].PGStatus = append(s.dumps[r].PGStatus, PGStatus{PGID: pgid, LastEnqueued: enq, LastStarted: started, LastCompleted: done})
	return s
}

func (s *scenario) without(ranks ...int) *scenario {
	for _, r := range ranks {
		delete(s.dumps, r)
	}
	return s
}

func (s *scenario) list() []*Dump {
	var out []*Dump
	for _, d := range s.dumps {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}

func ranks(rs ...int) []int { return rs }

func firstProblem(t *testing.T, p *ParityResult) *Block {
	t.Helper()
	for i := range p.Blocks {
		if p.Blocks[i].IsProblem() {
			return &p.Blocks[i]
		}
	}
	return nil
}
