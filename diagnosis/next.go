package diagnosis

import (
	"fmt"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/gpu"
)

// The next step. A verdict's text ends with the one call that would
// confirm it (Confirm, a tool call with its arguments first) and, where
// the evidence allows, what the engineer should do about it (Act): never
// more than the evidence holds. What it may use: the category, the
// culprit's wait outside collectives (a child process, a worker), the
// Flight Recorder's timeout on the waiters' pending collective (when
// they give up by themselves), and the GPU report (a node without GPUs).

// withNextSteps sets each hypothesis' Act for a stalled or dead job.
func withNextSteps(hs []Hypothesis, in Input, dead bool) {
	for i := range hs {
		hs[i].Act = actOf(hs[i], in, dead)
	}
	if len(hs) > 0 {
		if g := noGPUWords(in.GPU); g != "" && hs[0].Act != "" {
			hs[0].Act += "; " + g
		}
	}
}

func actOf(h Hypothesis, in Input, dead bool) string {
	var act string
	switch h.Category {
	case CatDeadlock:
		act = "kill the job and restart it: a deadlock does not end by itself"
	case CatCPUStall:
		act = fmt.Sprintf("if rank %d's frame does not move, kill the job and restart it", firstOr(h.culprits))
		if pid := waitedPID(in, h); pid > 0 {
			act = fmt.Sprintf("unblock or kill pid %d, what rank %d waits for; else kill the job and restart it", pid, firstOr(h.culprits))
		}
	case CatDeadRank, CatMainThreadDead:
		act = fmt.Sprintf("the job cannot finish without rank %s: restart it (the cause is in rank %s's ending above)", h.Culprits, h.Culprits)
	case CatMissing, CatMismatch:
		act = "kill the job and restart it: the waiters never get the collective they wait for; the rank-local condition around it (at the culprit's line) is the fix"
	case CatAllIn:
		act = "check the network and the backend (NCCL_DEBUG=INFO, the GPUs), then kill the job and restart it"
	case CatGILHeld:
		act = "kill the job and restart it; the native call holding the GIL is the fix"
	default:
		return ""
	}
	if dead {
		// Nothing is left to kill: what to fix before the restart.
		switch h.Category {
		case CatCPUStall:
			return fmt.Sprintf("the job is gone: what held rank %d at its line is the fix; restart it from its last checkpoint", firstOr(h.culprits))
		case CatMissing, CatMismatch:
			return "the job is gone: the rank-local condition around the culprit's line is the fix; restart it from its last checkpoint"
		case CatDeadlock, CatGILHeld, CatAllIn:
			return "the job is gone: restart it from its last checkpoint once the cause above is fixed"
		}
		return act
	}
	if t := pendingTimeout(in, h); t != "" {
		act += "; " + t
	}
	return act
}

// waitedPID is the process the culprit's main thread waits for outside
// collectives (a child, a DataLoader worker), 0 when none is known.
func waitedPID(in Input, h Hypothesis) int {
	if len(h.culprits) == 0 {
		return 0
	}
	f := in.Ranks[h.culprits[0]]
	if f == nil || !f.Alive || f.Waits == nil || len(f.Waits.Children) == 0 || waitKind(f.Main, f.Waits.IO) == "" {
		return 0
	}
	// The first blocked one, as the evidence line names it.
	for _, c := range f.Waits.Children {
		if c.State == "S" || c.State == "D" {
			return c.PID
		}
	}
	return 0
}

// pendingTimeout says when the waiters' pending collective times out by
// itself, from the process group's timeout the Flight Recorder holds: the
// soonest of the hypothesis' ranks (waiters first, then culprits).
func pendingTimeout(in Input, h Hypothesis) string {
	var best *rankStory
	var left time.Duration
	for _, r := range append(append([]int(nil), h.collateral...), h.culprits...) {
		s := in.storyOf(r)
		if s == nil || s.FR == nil {
			continue
		}
		if d, ok := s.FR.TimesOutIn(); ok && (best == nil || d < left) {
			best, left = s, d
		}
	}
	if best == nil {
		return ""
	}
	who := "rank " + fmt.Sprint(best.Rank)
	if left <= 0 {
		return fmt.Sprintf("%s's %s is past the group's timeout (%s): expect the job to fail any moment", who, best.FR, durWords(best.FR.Timeout))
	}
	return fmt.Sprintf("left alone, %s's %s times out in about %s (the group's timeout, %s) and the job fails then", who, best.FR, durWords(left), durWords(best.FR.Timeout))
}

// noGPUWords says the node has no GPU when every GPU report says so.
func noGPUWords(rs []gpu.Report) string {
	if len(rs) == 0 {
		return ""
	}
	var states []string
	for _, r := range rs {
		switch r.Status.State {
		case gpu.StateNoDevice, gpu.StateNoDriver:
			states = append(states, string(r.Status.State))
		default:
			return ""
		}
	}
	node := "this node"
	if len(rs) > 1 {
		node = fmt.Sprintf("these %d nodes", len(rs))
	}
	return fmt.Sprintf("no GPUs on %s (%s): no GPU to check", node, strings.Join(states, ", "))
}

func firstOr(rs []int) int {
	if len(rs) == 0 {
		return -1
	}
	return rs[0]
}

// liveOnly are the checks only a live process answers.
var liveOnly = []string{"get_stacks", "snapshot_flight_recorder", "/proc/locks", "eval_python"}

// deadConfirms: with every process gone, a confirm that asks a live
// process is one the caller cannot run; what the ranks left is asked for
// instead (how each ended, their last ring rows), keeping what the rings
// alone can show as the thing to look for.
func deadConfirms(hs []Hypothesis) {
	for i := range hs {
		h := &hs[i]
		live := false
		for _, w := range liveOnly {
			live = live || strings.Contains(h.Confirm, w)
		}
		if !live {
			continue
		}
		_, claim, _ := strings.Cut(h.Confirm, ": ")
		if r := firstOr(h.culprits); r >= 0 {
			h.Confirm = fmt.Sprintf("no process is left to ask: list_processes {\"include_dead\":true} (how rank %d ended) and query \"SELECT * FROM python.comm_collective WHERE _rank = %d ORDER BY timestamp DESC LIMIT 5\" (its last collectives)", r, r)
		} else {
			h.Confirm = "no process is left to ask: list_processes {\"include_dead\":true} (how each rank ended) and query \"SELECT _rank, max(timestamp) AS last, count(*) AS calls FROM python.comm_collective GROUP BY _rank\" (where each rank's collectives stopped)"
		}
		if strings.Contains(claim, "ring") {
			h.Confirm += "; expect " + claim
		}
	}
}
