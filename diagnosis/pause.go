package diagnosis

import (
	"fmt"
	"strings"
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
// flight, no stack is in torch.distributed, no async point-to-point call
// waits for its peer), and the stall is younger
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
	// An async send or receive a peer has not matched is pending too: its
	// Work.wait() sleeps on a futex, which reads like a GIL handoff.
	m, _ := FromComm(in.Comm, in.World)
	busy := 0
	for _, f := range sortedFacts(in.Ranks) {
		if rk := m.Ranks[f.Rank]; rk != nil && pendingAsyncP2P(m, rk) != nil {
			return ""
		}
		if !f.Alive {
			return "" // a dead rank is no pause
		}
		if inFlight[f.Rank] || c10dCall(f.Main) != "" {
			return ""
		}
		if !mainBusy(f) {
			return "" // asleep in a wait (it may be waiting for a peer), or not read
		}
		busy++
	}
	if busy < 1 {
		return ""
	}
	return fmt.Sprintf("likely a pause, not a hang: every rank's main thread is busy (on a CPU, in disk I/O or handing the GIL back and forth, per /proc and its stack) outside any collective and none is pending, as in a validation pass or a checkpoint; quiet for %s, it is taken as a stall past %s",
		least.Round(time.Millisecond), limit.Round(time.Second))
}

// waitCalls are the innermost Python functions of a thread that waits for
// something (a queue, a lock, a socket, a child, a timer).
var waitCalls = map[string]bool{"wait": true, "get": true, "acquire": true, "select": true, "poll": true,
	"recv": true, "recv_into": true, "recvfrom": true, "accept": true, "readinto": true, "read": true,
	"readline": true, "sleep": true, "join": true, "communicate": true, "_wait_for_tstate_lock": true,
	"_try_get_data": true, "_get_data": true, "flock": true, "lockf": true}

// mainBusy: the main thread computes. On a CPU or in disk I/O (R, D); or
// asleep on a futex in the job's or a package's computation (not in a wait
// call, not in the standard library): a busy thread hands the GIL back and
// forth (torch's ops release it) and is often caught there.
func mainBusy(f *RankFacts) bool {
	switch mainState(f) {
	case "R", "D":
		return true
	case "S":
		t := f.Main
		if t == nil || len(t.Frames) == 0 || waitCalls[t.Frames[0].Function] || c10dCall(t) != "" || inBackward(t) ||
			strings.Contains(t.Frames[0].File, "/lib/python3") && !strings.Contains(t.Frames[0].File, "-packages/") {
			return false // a wait, or somewhere in the standard library (threading's shutdown, a queue)
		}
		return strings.Contains(mainWChan(f), "futex")
	}
	return false
}
