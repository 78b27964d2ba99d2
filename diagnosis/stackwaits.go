package diagnosis

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// Who waits for whom when the rings place no rank inside a collective (a
// job whose collectives the agent does not record: its own sockets, DDP's
// reducer in C++, a plain-Python barrier): the stacks still show it. Two
// shapes are read, in this order:
//
//   - main threads inside a torch.distributed collective or P2P call;
//   - most live ranks blocked (asleep in the kernel, per /proc) in one and
//     the same call while the others are elsewhere.
//
// The ranks so seen waiting are put in one collective of the whole job,
// without a sequence number (Op.fromStack), so that the wait-for graph
// finds the ranks they wait for with the same rule as for recorded ones.
// The order of collectives is unknown there, so the hypotheses it gives are
// held at medium confidence, and at low when nothing times the job either.

// stackGroup names the whole job's collective seen in the stacks.
const stackGroup = "job (from the stacks)"

// c10dCalls are torch.distributed's blocking entry points.
var c10dCalls = map[string]bool{
	"all_reduce": true, "all_gather": true, "all_gather_into_tensor": true, "all_gather_object": true,
	"broadcast": true, "broadcast_object_list": true, "reduce": true, "reduce_scatter": true,
	"reduce_scatter_tensor": true, "all_to_all": true, "all_to_all_single": true, "gather": true,
	"gather_object": true, "scatter": true, "scatter_object_list": true, "barrier": true,
	"monitored_barrier": true, "send": true, "recv": true, "send_object_list": true,
	"recv_object_list": true, "batch_isend_irecv": true, "wait": true,
}

// c10dCall is the torch.distributed call a main thread is inside, "" if
// none: the innermost frame of torch/distributed/ named like one.
func c10dCall(t *stacks.Thread) string {
	if t == nil {
		return ""
	}
	for _, f := range t.Frames {
		if strings.Contains(f.File, "/torch/distributed/") && c10dCalls[f.Function] && !launcherFrame(f) {
			return f.Function
		}
	}
	return ""
}

// frameKey names a frame as the answer says it: "function at file:line".
func frameKey(fr stacks.Frame) string {
	return fmt.Sprintf("%s at %s:%d", fr.Function, path.Base(fr.File), fr.Line)
}

// mainState is the kernel state of a rank's main thread (R, S, D, ...),
// "" when /proc did not say.
func mainState(f *RankFacts) string { return mainOS(f).State }

// mainWChan is the kernel function the main thread sleeps in, "" unknown.
func mainWChan(f *RankFacts) string { return mainOS(f).WChan }

// mainOS is what /proc says of the main thread: joined to its frames when
// the capture did, else the kernel thread whose id is the pid.
func mainOS(f *RankFacts) stacks.Thread {
	if f.Main != nil && f.Main.State != "" {
		return *f.Main
	}
	for _, t := range f.OSThreads {
		if (f.PID > 0 && t.NativeID == f.PID) || t.IsMain {
			return t
		}
	}
	return stacks.Thread{}
}

// stackWaits adds the waits the stacks show to m, when m has no rank in a
// collective. It returns the data-quality line that says so, "" when the
// stacks show none.
func stackWaits(m *Model, in Input) string {
	for _, rk := range m.Ranks {
		if rk.Status == InCollective {
			return ""
		}
	}
	var live []*RankFacts
	for _, f := range sortedFacts(in.Ranks) {
		rk := m.Ranks[f.Rank]
		// A dead rank counts with the stack it left (its crash file, or the
		// dump of the SIGTERM its launcher stopped it with) unless it died
		// of its own exception (Dead in the model).
		if f.Main != nil && rk != nil && rk.Status != Dead {
			live = append(live, f)
		}
	}
	if len(live) < 2 {
		return ""
	}
	in_ := map[int]string{}
	for _, f := range live {
		if op := c10dCall(f.Main); op != "" {
			in_[f.Rank] = op
		}
	}
	how := "inside a torch.distributed call"
	if len(in_) == 0 {
		place, ranks := commonBlockedPlace(live)
		if place == "" {
			return ""
		}
		for _, r := range ranks {
			in_[r] = place
		}
		how = "asleep in the kernel in one call (" + jobtext.Quote(place, jobtext.Line) + ") while the others are elsewhere"
	}
	members := make([]int, 0, len(m.Ranks))
	for r := range m.Ranks {
		members = append(members, r)
	}
	sort.Ints(members)
	m.Groups[stackGroup] = members
	var waiting []int
	for r, op := range in_ {
		rk := m.Ranks[r]
		rk.Status, rk.In = InCollective, &Op{Group: stackGroup, Seq: 1, Name: op}
		rk.Issued[stackGroup] = 1
		waiting = append(waiting, r)
	}
	sort.Ints(waiting)
	return fmt.Sprintf("no rank is recorded inside a collective (the rings hold none in flight); who waits for whom is read from the stacks: %s %s. %s",
		rankWords(waiting), how, stackCap)
}

// stackCap is what waits read from the stacks alone are worth.
const stackCap = "Without sequence numbers, ranks in different collectives cannot be told apart, so no verdict from this is above medium confidence"

// commonBlockedPlace is the innermost frame where more than half of the
// live ranks' main threads are, each asleep in the kernel (S or D), when at
// least one live rank is elsewhere; "" when there is no such frame. The
// innermost frame, not the job's own line: ranks waiting in the same
// library call (a socket read, autograd's backward that waits for DDP's
// all_reduce) reach it from different lines of the job (a data-parallel
// and a tensor-parallel sync, say).
func commonBlockedPlace(live []*RankFacts) (string, []int) {
	at := map[string][]int{}
	for _, f := range live {
		if len(f.Main.Frames) == 0 {
			continue
		}
		st := mainState(f)
		if st != "S" && st != "D" {
			continue
		}
		k := frameKey(f.Main.Frames[0])
		at[k] = append(at[k], f.Rank)
	}
	best, n := "", 0
	for k, rs := range at {
		if len(rs) > n || (len(rs) == n && k < best) {
			best, n = k, len(rs)
		}
	}
	if n < 2 || 2*n <= len(live) || n == len(live) {
		return "", nil
	}
	sort.Ints(at[best])
	return best, at[best]
}

// fromStacks reports whether a hypothesis rests on waits read from the
// stacks (its ranks are waited for in, or are inside, stackGroup).
func fromStacks(h Hypothesis, m Model) bool {
	if h.group == stackGroup {
		return true
	}
	for _, r := range h.collateral {
		if rk := m.Ranks[r]; rk != nil && rk.In != nil && rk.In.fromStack() {
			return true
		}
	}
	return false
}

// stackSourced rewrites the evidence of a hypothesis the stacks gave: its
// lines came from the stacks, not the rings, and its confidence is capped
// (medium; low when no clock times the job).
func stackSourced(h Hypothesis, unknown bool) Hypothesis {
	ev := make([]Evidence, 0, len(h.Evidence)+1)
	for _, e := range h.Evidence {
		if e.Source == "comm_rings" {
			e.Source = "stacks"
			e.Text = strings.ReplaceAll(e.Text, "the collectives it is waited for in were never entered by it", "its peers' main threads wait and its own is elsewhere")
		}
		ev = append(ev, e)
	}
	h.Evidence = ev
	// The Flight Recorder agreeing is a second source (it saw the
	// collective the stacks only infer): no cap then.
	if h.Confidence == High && !frAgrees(h) {
		h.Confidence = Medium
	}
	if unknown {
		h.Confidence = Low
		h.Evidence = append(h.Evidence, Evidence{"progress", "nothing times this job (no step, collective or span recorded): a rank that is only slower at this instant looks the same; get_stacks again in a few seconds: frames that have not moved make it a hang"})
	}
	if h.Collateral != "" {
		h.Collateral = rankset.Format(h.collateral)
	}
	return h
}

func frAgrees(h Hypothesis) bool {
	for _, e := range h.Evidence {
		if e.Source == "flight_recorder" && strings.HasSuffix(e.Text, "(agrees)") {
			return true
		}
	}
	return false
}

// unflushedWaits puts in the collective its stack shows a rank whose rings
// end with a finished call: the row of the call it is in (or died in) was
// not written yet (the agent writes rows from a flusher thread, and a rank
// that dies within it loses the last one). It takes the place its stack
// shows when a peer is recorded inside the next collective of a group the
// rank is a member of, on which the rank has issued one fewer. It returns
// the ranks so placed.
func unflushedWaits(m *Model, in Input) []int {
	var placed []int
	for _, f := range sortedFacts(in.Ranks) {
		rk := m.Ranks[f.Rank]
		if rk == nil || rk.Status != Running || f.Main == nil {
			continue
		}
		op := c10dCall(f.Main)
		if op == "" {
			continue
		}
		// Only where one collective fits: with two (a pair's and the
		// default group's), the stack does not say which it is in.
		var fits []Op
		for _, peer := range sortedRanks(*m) {
			if peer.Status != InCollective || peer.In == nil || peer.In.fromStack() {
				continue
			}
			g := peer.In.Group
			if !slices.Contains(m.Groups[g], f.Rank) || rk.Issued[g]+1 != peer.In.Seq {
				continue
			}
			at := Op{Group: g, Seq: peer.In.Seq, Name: op}
			if !slices.ContainsFunc(fits, func(o Op) bool { return o.Group == at.Group && o.Seq == at.Seq }) {
				fits = append(fits, at)
			}
		}
		if len(fits) != 1 {
			continue
		}
		at := fits[0]
		rk.Status, rk.In = InCollective, &at
		rk.Issued[at.Group] = at.Seq
		placed = append(placed, f.Rank)
	}
	return placed
}

// inBackward: the main thread waits in autograd's backward, where DDP's
// gradient all_reduce (issued from C++, recorded by no ring) is waited for.
func inBackward(t *stacks.Thread) bool {
	return t != nil && len(t.Frames) > 0 && t.Frames[0].Function == "_engine_run_backward" && strings.Contains(t.Frames[0].File, "/torch/autograd/")
}

// mergeSameWait folds CPU-side culprits blocked in one and the same call
// (an flock, a socket read) into one hypothesis at low confidence: ranks
// that all wait at one place wait for one thing (a lock, a server), held
// by someone else, perhaps a rank that waits for them; none of them is
// shown to be the cause.
func mergeSameWait(hs []Hypothesis, in Input) []Hypothesis {
	at := map[string][]int{}
	for i, h := range hs {
		if h.Category != CatCPUStall || len(h.culprits) != 1 {
			continue
		}
		f := in.Ranks[h.culprits[0]]
		if f == nil || f.Main == nil || len(f.Main.Frames) == 0 {
			continue
		}
		k := frameKey(f.Main.Frames[0])
		at[k] = append(at[k], i)
	}
	drop := map[int]bool{}
	var merged []Hypothesis
	for _, k := range slices.Sorted(maps.Keys(at)) {
		idx := at[k]
		if len(idx) < 2 {
			continue
		}
		first := hs[idx[0]]
		h := Hypothesis{Category: CatCPUStall, Confidence: Low, Where: first.Where, whereThread: first.whereThread,
			Confirm: "what the call waits for: /proc/locks for a file lock (its holder's pid), the peer of a socket; get_stacks on the holder",
			Refute:  "the ranks leave the call one by one (a busy resource, not a held one)"}
		var coll []int
		for _, i := range idx {
			drop[i] = true
			h.culprits = append(h.culprits, hs[i].culprits...)
			coll = append(coll, hs[i].collateral...)
		}
		sort.Ints(h.culprits)
		slices.Sort(coll)
		h.collateral = slices.DeleteFunc(slices.Compact(coll), func(r int) bool { return slices.Contains(h.culprits, r) })
		h.Collateral = rankset.Format(h.collateral)
		h.Evidence = []Evidence{{"stacks", fmt.Sprintf("ranks %s are all blocked in the same call (%s): they wait for one thing (a lock, a file, a server) that someone else holds, perhaps a rank that waits for them (a deadlock); none of them is shown to be the cause",
			rankset.Format(h.culprits), jobtext.Quote(k, jobtext.Line))}}
		if len(h.collateral) > 0 {
			h.Evidence = append(h.Evidence, Evidence{"comm_rings", fmt.Sprintf("%s wait for them in collectives", rankWords(h.collateral))})
		}
		h.Culprits = rankset.Format(h.culprits)
		merged = append(merged, h)
	}
	if len(merged) == 0 {
		return hs
	}
	var out []Hypothesis
	for i, h := range hs {
		if !drop[i] {
			out = append(out, h)
		}
	}
	return append(out, merged...)
}

// stackStraggler reads a moving job's stack samples for a straggler: most
// live ranks asleep in one call (DDP's backward, a collective) while the
// rest are elsewhere. One sample is a hint (low); with more samples
// (RankFacts.Samples), the ranks elsewhere in every one of them are the
// straggler (medium), and nothing is said when no rank is elsewhere in
// all of them.
func stackStraggler(in Input) *Hypothesis {
	var live []*RankFacts
	rounds := -1
	for _, f := range sortedFacts(in.Ranks) {
		if f.Alive && f.Main != nil {
			live = append(live, f)
			if rounds < 0 || len(f.Samples) < rounds {
				rounds = len(f.Samples)
			}
		}
	}
	if rounds < 0 {
		return nil
	}
	var always map[int]bool
	var waiting []int
	place := ""
	for k := 0; k <= rounds; k++ {
		sample := make([]*RankFacts, len(live))
		for i, f := range live {
			c := *f
			if k > 0 {
				c.Main = f.Samples[k-1]
			}
			sample[i] = &c
		}
		p, w := commonBlockedPlace(sample)
		if p == "" {
			return nil // a sample where nobody waits for anyone
		}
		elsewhere := map[int]bool{}
		for _, f := range live {
			if !slices.Contains(w, f.Rank) {
				elsewhere[f.Rank] = true
			}
		}
		if always == nil {
			always, place, waiting = elsewhere, p, w
			continue
		}
		for r := range always {
			if !elsewhere[r] {
				delete(always, r)
			}
		}
	}
	var others []int
	for r := range always {
		others = append(others, r)
	}
	sort.Ints(others)
	if len(others) == 0 {
		return nil
	}
	var rest []int
	for _, f := range live {
		if !slices.Contains(others, f.Rank) {
			rest = append(rest, f.Rank)
		}
	}
	h := &Hypothesis{Category: CatStraggler, culprits: others, Confidence: Low,
		Confirm: "get_stacks three times, a second apart: the same rank elsewhere each time while the others wait",
		Refute:  "another rank is the one elsewhere in the next samples"}
	if rounds == 0 {
		h.collateral, h.Collateral = waiting, rankset.Format(waiting)
		h.Evidence = []Evidence{{"stacks", fmt.Sprintf("in this one stack sample %s wait asleep in %s while %s elsewhere: the one the others wait for each step, if it holds over samples",
			rankWords(waiting), place, rankWords(others)+plural(len(others), " is", " are"))}}
		return h
	}
	h.Confidence = Medium
	h.collateral, h.Collateral = rest, rankset.Format(rest)
	h.Evidence = []Evidence{{"stacks", fmt.Sprintf("in each of %d stack samples the other ranks wait asleep in one call (%s in the first) while %s elsewhere: they wait for %s every step",
		rounds+1, place, rankWords(others)+plural(len(others), " is", " are"), them(len(others)))}}
	h.Confirm = "the slow_rank skill, or get_stacks a few more times: the same rank elsewhere"
	return h
}
