package diagnosis

import "slices"

// asyncP2PWaits places the ranks that wait on point-to-point calls they
// launched asynchronously (isend, irecv, batch_isend_irecv, then
// Work.wait(), as torch's pipelining schedules do): their rows record the
// launch only, so the rings show them outside any call. A rank counts as
// waiting in the oldest of its trailing async calls that its peer has not
// matched (its k-th receive from p while p sent fewer than k, or its k-th
// send to p while p posted fewer than k receives) when its main thread is
// asleep in the job's own code (Work.wait() is C++: the innermost Python
// frame is the line that called it). A rank busy on the CPU, or asleep in
// a library (a DataLoader's queue), is left where it is: the posted calls
// may be a prefetch. It returns the ranks placed.
func asyncP2PWaits(m *Model, in Input) []int {
	var placed []int
	for _, rk := range sortedRanks(*m) {
		f := in.Ranks[rk.Rank]
		if rk.Status != Running || f == nil || !f.Alive || f.Main == nil || len(f.Main.Frames) == 0 || mainState(f) != "S" {
			continue
		}
		if w := userFrame(f.Main); w == nil || w.File != f.Main.Frames[0].File || w.Line != f.Main.Frames[0].Line {
			continue
		}
		if op := pendingAsyncP2P(*m, rk); op != nil {
			rk.Status, rk.In = InCollective, op
			placed = append(placed, rk.Rank)
		}
	}
	return placed
}

// pendingAsyncP2P is the oldest of rk's trailing async point-to-point
// calls (nothing issued after them) that its peer has not matched, nil
// when none.
func pendingAsyncP2P(m Model, rk *Rank) *Op {
	var trailing []Op
	for i := len(rk.History) - 1; i >= 0; i-- {
		op := rk.History[i]
		if _, _, ok := p2pChannel(op.Group); !ok || (op.Name != "isend" && op.Name != "irecv") {
			break
		}
		trailing = append(trailing, op)
	}
	slices.Reverse(trailing)
	for _, op := range trailing {
		src, dst, _ := p2pChannel(op.Group)
		peer := dst
		if dst == rk.Rank {
			peer = src
		}
		if pr := m.Ranks[peer]; pr == nil || pr.Issued[op.Group] < op.Seq {
			return &op
		}
	}
	return nil
}
