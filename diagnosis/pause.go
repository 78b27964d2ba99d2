package diagnosis

import (
	"fmt"
	"time"
)

// StatePaused: past the stall threshold, but every live rank is busy on
// its CPU outside any collective and none is pending: a validation pass,
// a checkpoint's serialisation, an evaluation. A hang leaves someone
// waiting; a pause does not. Said as a likely pause until it outlasts the
// pause limit, then a stall like any other.
const StatePaused = "paused"

// pauseLimit is how long a pause may last before it is taken as a stall:
// the longer of the no-history stall threshold (2 minutes by default) and
// four stall thresholds of the job's own.
func pauseLimit(js JobState, opt StateOptions) time.Duration {
	opt.defaults()
	return max(opt.NoHistoryStall, 4*js.Threshold)
}

// likelyPause says why a stalled job looks like a pause, "" when it does
// not: every live rank's main thread is on a CPU or in disk I/O (R or D in
// /proc, none asleep), none is inside a collective (the rings hold none in
// flight, no stack is in torch.distributed), and the stall is younger
// than the pause limit.
func likelyPause(in Input, js JobState) string {
	if js.State != StateStalled {
		return ""
	}
	least := time.Duration(-1)
	for _, d := range js.Idle {
		if least < 0 || d < least {
			least = d
		}
	}
	limit := pauseLimit(js, in.State)
	if least < 0 || least >= limit {
		return ""
	}
	inFlight := map[int]bool{}
	last := map[int]int64{}
	for _, row := range in.Comm {
		if row.TimestampUS >= last[row.Rank] {
			last[row.Rank] = row.TimestampUS
			inFlight[row.Rank] = row.DurationMS < 0
		}
	}
	busy := 0
	for _, f := range sortedFacts(in.Ranks) {
		if !f.Alive {
			return "" // a dead rank is no pause
		}
		if inFlight[f.Rank] || c10dCall(f.Main) != "" {
			return ""
		}
		switch mainState(f) {
		case "R", "D":
			busy++
		default:
			return "" // asleep (it may be waiting for a peer) or not read
		}
	}
	if busy < 1 {
		return ""
	}
	return fmt.Sprintf("likely a pause, not a hang: every rank's main thread is busy (on a CPU or in disk I/O, per /proc) outside any collective and none is pending, as in a validation pass or a checkpoint; quiet for %s, it is taken as a stall past %s",
		least.Round(time.Millisecond), limit.Round(time.Second))
}
