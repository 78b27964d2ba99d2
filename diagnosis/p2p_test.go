package diagnosis

import (
	"fmt"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// p2pOp is one point-to-point call of a simulated stage.
type p2pOp struct {
	send bool
	peer int
}

// gpipe is stage s's calls in one step of a GPipe schedule over n stages
// and m micro-batches: every activation forward, then every gradient back.
// skip, when >= 0, is the micro-batch whose activation the stage does not
// send on (the bug).
func gpipe(s, n, m, skip int) []p2pOp {
	var ops []p2pOp
	for mb := 0; mb < m; mb++ {
		if s > 0 {
			ops = append(ops, p2pOp{false, s - 1})
		}
		if s < n-1 && mb != skip {
			ops = append(ops, p2pOp{true, s + 1})
		}
	}
	for mb := 0; mb < m; mb++ {
		if s < n-1 {
			ops = append(ops, p2pOp{false, s + 1})
		}
		if s > 0 {
			ops = append(ops, p2pOp{true, s - 1})
		}
	}
	return ops
}

// runP2P runs each rank's program until every rank is done or blocked: a
// send returns at once (buffered, as gloo's small messages do), the k-th
// receive from a peer waits for that peer's k-th send to this rank. It
// returns the rows the agent would have written: every call made, each
// rank's blocked receive last with duration -1.
func runP2P(progs [][]p2pOp) []evidence.CommRow { return runP2POps(progs, false) }

// runP2POps is runP2P; async: the calls are isend/irecv, whose rows hold
// the launch only (a blocked receive was launched and returned).
func runP2POps(progs [][]p2pOp, async bool) []evidence.CommRow {
	n := len(progs)
	pc := make([]int, n)
	sent := map[[2]int]int64{} // [src,dst] -> sends
	recvd := map[[2]int]int64{}
	var rows []evidence.CommRow
	ts := int64(1)
	row := func(r int, op p2pOp, seq int64, dur float64) {
		name := "recv"
		if op.send {
			name = "send"
		}
		if async {
			name = "i" + name
			dur = max(dur, 0.05)
		}
		rows = append(rows, evidence.CommRow{Rank: r, TimestampUS: ts, Op: name, Ranks: "[0, 1, 2, 3]", GroupSeq: seq, DurationMS: dur, Peer: op.peer})
		ts++
	}
	for moved := true; moved; {
		moved = false
		for r := 0; r < n; r++ {
			for pc[r] < len(progs[r]) {
				op := progs[r][pc[r]]
				if op.send {
					k := [2]int{r, op.peer}
					sent[k]++
					row(r, op, sent[k], 0.1)
				} else {
					k := [2]int{op.peer, r}
					if sent[k] <= recvd[k] {
						break
					}
					recvd[k]++
					row(r, op, recvd[k], 0.1)
				}
				pc[r]++
				moved = true
			}
		}
	}
	for r := 0; r < n; r++ {
		if pc[r] < len(progs[r]) {
			op := progs[r][pc[r]]
			k := [2]int{op.peer, r}
			row(r, op, recvd[k]+1, -1)
		}
	}
	return rows
}

// TestPipelineSkippedSend: a GPipe stage that does not send one
// micro-batch's activation on goes to its backward and waits there for a
// gradient its next stage never sends, waiting itself for that
// activation; the stages before wait for gradients in a chain. The stage
// that broke its own order is the culprit, not the stage that waits for
// it, nor the first stage.
func TestPipelineSkippedSend(t *testing.T) {
	const n, m, steps = 4, 4, 6
	for _, culprit := range []int{1, 2} {
		for _, skip := range []int{0, m - 1} {
			t.Run(fmt.Sprintf("stage%d_mb%d", culprit, skip), func(t *testing.T) {
				progs := make([][]p2pOp, n)
				for s := 0; s < n; s++ {
					for step := 0; step < steps; step++ {
						sk := -1
						if s == culprit && step == steps-1 {
							sk = skip
						}
						progs[s] = append(progs[s], gpipe(s, n, m, sk)...)
					}
				}
				rows := runP2P(progs)
				// the agent reads each rank's last 64 calls
				rows = lastPerRank(rows, 64)
				model, problems := FromComm(rows, n)
				if len(problems) > 0 {
					t.Fatal(problems)
				}
				g := WaitFor(model)
				if len(g.Sinks) != 1 {
					t.Fatalf("sinks %+v (edges %+v)", g.Sinks, g.Edges)
				}
				s := g.Sinks[0]
				if s.Kind != SinkDiverged || len(s.Ranks) != 1 || s.Ranks[0] != culprit {
					t.Fatalf("sink %+v", s)
				}
				// messages are numbered by count: whichever it skipped, the
				// next stage waits for its last one of the step
				if !strings.Contains(s.Why, fmt.Sprintf("rank %d entered recv #%d from rank %d (rings' count) having sent rank %d %d message(s), while rank %d waits for #%d (rings' count)",
					culprit, (steps-1)*m+1, culprit+1, culprit+1, steps*m-1, culprit+1, steps*m)) {
					t.Errorf("why: %s", s.Why)
				}
			})
		}
	}
}

// TestPipelineStageStalled: a stage that stops calling at all (stuck in
// its loader) is a CPU-side sink; every other stage waits for it through
// the channels.
func TestPipelineStageStalled(t *testing.T) {
	const n, m = 4, 4
	progs := make([][]p2pOp, n)
	for s := 0; s < n; s++ {
		for step := 0; step < 5; step++ {
			progs[s] = append(progs[s], gpipe(s, n, m, -1)...)
		}
	}
	progs[0] = progs[0][:len(progs[0])-2*m] // stage 0 stops before its last step
	rows := lastPerRank(runP2P(progs), 64)
	model, _ := FromComm(rows, n)
	g := WaitFor(model)
	if len(g.Sinks) != 1 || g.Sinks[0].Kind != SinkCPU || g.Sinks[0].Ranks[0] != 0 {
		t.Fatalf("sinks %+v", g.Sinks)
	}
	if fmt.Sprint(g.Collateral) != "[1 2 3]" {
		t.Errorf("collateral %v", g.Collateral)
	}
}

// TestHealthyPipelineWaitsForNobody: between steps (every message
// matched) no stage waits.
func TestHealthyPipelineWaitsForNobody(t *testing.T) {
	const n, m = 4, 4
	progs := make([][]p2pOp, n)
	for s := 0; s < n; s++ {
		for step := 0; step < 5; step++ {
			progs[s] = append(progs[s], gpipe(s, n, m, -1)...)
		}
	}
	model, _ := FromComm(lastPerRank(runP2P(progs), 64), n)
	if g := WaitFor(model); len(g.Sinks) != 0 || len(g.Edges) != 0 {
		t.Fatalf("%+v", g)
	}
}

func lastPerRank(rows []evidence.CommRow, k int) []evidence.CommRow {
	by := map[int][]evidence.CommRow{}
	for _, r := range rows {
		by[r.Rank] = append(by[r.Rank], r)
	}
	var out []evidence.CommRow
	for r := 0; r < len(by); r++ {
		rs := by[r]
		out = append(out, rs[max(0, len(rs)-k):]...)
	}
	return out
}

// TestP2PWithoutPeer: point-to-point rows that name no peer (an older
// agent's, or a receive from any rank) do not shift the group's count,
// and a rank waiting in one is no sink of its own unless someone waits
// for it, and then an undecided one.
func TestP2PWithoutPeer(t *testing.T) {
	g := "[0, 1]"
	rows := []evidence.CommRow{
		{Rank: 0, TimestampUS: 1, Op: "all_reduce", Ranks: g, GroupSeq: 1, DurationMS: 1, Peer: -1},
		{Rank: 0, TimestampUS: 2, Op: "recv", Ranks: g, GroupSeq: 1, DurationMS: -1, Peer: -1},
		{Rank: 1, TimestampUS: 1, Op: "all_reduce", Ranks: g, GroupSeq: 1, DurationMS: 1, Peer: -1},
		{Rank: 1, TimestampUS: 3, Op: "all_reduce", Ranks: g, GroupSeq: 2, DurationMS: -1, Peer: -1},
	}
	m, problems := FromComm(rows, 2)
	if len(problems) != 1 || !strings.Contains(problems[0], "name no peer") {
		t.Errorf("problems %q", problems)
	}
	if m.Ranks[0].Issued["0-1"] != 1 || m.Ranks[0].In == nil || m.Ranks[0].In.String() != "recv from any rank" {
		t.Fatalf("rank 0: %+v", m.Ranks[0])
	}
	gr := WaitFor(m)
	if len(gr.Sinks) != 1 || gr.Sinks[0].Kind != SinkUndecided || gr.Sinks[0].Ranks[0] != 0 || !strings.Contains(gr.Sinks[0].Why, "not recorded") {
		t.Fatalf("%+v", gr.Sinks)
	}
}

// TestAsyncPipelineSkippedSend: the same GPipe bug with isend/irecv and
// Work.wait(): the rows show every stage outside any call; stages asleep
// in their own code after receives nobody matched wait in them, and the
// stage that broke its order is found. A stage busy on the CPU, or asleep
// in a library, is not placed.
func TestAsyncPipelineSkippedSend(t *testing.T) {
	const n, m, steps = 4, 4, 6
	progs := make([][]p2pOp, n)
	for s := 0; s < n; s++ {
		for step := 0; step < steps; step++ {
			sk := -1
			if s == 2 && step == steps-1 {
				sk = m - 1
			}
			progs[s] = append(progs[s], gpipe(s, n, m, sk)...)
		}
	}
	asleep := func(r int, file, state string) *RankFacts {
		return &RankFacts{Rank: r, Alive: true, Main: &stacks.Thread{State: state,
			Frames: []stacks.Frame{{File: file, Line: 42, Function: "train_step"}}}}
	}
	in := Input{World: n, Ranks: map[int]*RankFacts{}}
	for r := 0; r < n; r++ {
		in.Ranks[r] = asleep(r, "/job/pipe.py", "S")
	}
	model, _ := FromComm(lastPerRank(runP2POps(progs, true), 64), n)
	if g := WaitFor(model); len(g.Sinks) != 0 {
		t.Fatalf("launch rows alone: %+v", g.Sinks)
	}
	placed := asyncP2PWaits(&model, in)
	if fmt.Sprint(placed) != "[0 1 2 3]" {
		t.Fatalf("placed %v", placed)
	}
	g := WaitFor(model)
	if len(g.Sinks) != 1 || g.Sinks[0].Kind != SinkDiverged || g.Sinks[0].Ranks[0] != 2 {
		t.Fatalf("%+v", g.Sinks)
	}
	// busy, or asleep in the standard library: not placed
	in.Ranks[3] = asleep(3, "/job/pipe.py", "R")
	in.Ranks[1] = asleep(1, "/usr/lib/python3.11/multiprocessing/queues.py", "S")
	model, _ = FromComm(lastPerRank(runP2POps(progs, true), 64), n)
	if placed := asyncP2PWaits(&model, in); fmt.Sprint(placed) != "[0 2]" {
		t.Fatalf("placed %v", placed)
	}
}

func TestP2PChannelNames(t *testing.T) {
	if s, d, ok := p2pChannel(p2pGroup(12, 3)); !ok || s != 12 || d != 3 {
		t.Errorf("round trip: %d %d %v", s, d, ok)
	}
	for _, g := range []string{"0-3", "p2p ?", "p2p 1>", "p2p x>2", "p2p 1-2", ""} {
		if _, _, ok := p2pChannel(g); ok {
			t.Errorf("%q read as a channel", g)
		}
	}
}
