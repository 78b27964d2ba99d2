package diagnosis

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// orderDeaths puts the job's deaths in order. Several dead ranks are one
// story, not one culprit each: the first to die is the culprit (its own
// exception, an OOM kill), the later ones died of it (a peer's connection
// closed, a watchdog's timeout). The order comes from the ending records'
// times; a rank that left none (SIGKILL) is said and ranked last. When
// the wait-for graph found nobody (every rank dead and out of its
// collectives), the deaths are still the explanation if a rank died of
// its own exception.
func orderDeaths(hs []Hypothesis, in Input) []Hypothesis {
	var deadHs []Hypothesis
	var rest []Hypothesis
	for _, h := range hs {
		if h.Category == CatDeadRank {
			deadHs = append(deadHs, h)
		} else {
			rest = append(rest, h)
		}
	}
	var dead []*RankFacts
	raised, peerDeaths := false, false
	for _, f := range in.Ranks {
		peerDeaths = peerDeaths || (!f.Alive && deathKind(f) == diedOfPeer)
	}
	for _, f := range sortedFacts(in.Ranks) {
		// A rank gone without a word is part of the story when others
		// died of a vanished peer: it may be that peer.
		if !f.Alive && (f.Raised || f.EndedNS > 0 || f.Crash != nil || inHyps(deadHs, f.Rank) || peerDeaths) {
			dead = append(dead, f)
			raised = raised || f.Raised
		}
	}
	switch {
	case len(deadHs) == 0 && (len(rest) > 0 || !raised):
		return hs
	case len(deadHs) == 1 && len(dead) <= 1:
		h := deadHs[0]
		if f := in.Ranks[h.culprits[0]]; f != nil && f.Record != nil {
			h.whereThread = exceptionThread(f.Record.Exception)
			mainThreadEnded(&h, f)
		}
		return append(rest, h)
	}
	// Earliest known ending of its own cause first; then a rank that left
	// no record (killed by a signal: SIGKILL, SIGSEGV, the OOM killer),
	// which comes before deaths of a broken connection: those died of a
	// peer that vanished, not of their own cause; by time within each.
	sort.SliceStable(dead, func(i, j int) bool {
		ki, kj := deathKind(dead[i]), deathKind(dead[j])
		if ki != kj {
			return ki < kj
		}
		a, b := dead[i].EndedNS, dead[j].EndedNS
		if (a > 0) != (b > 0) {
			return a > 0
		}
		return a < b
	})
	first := dead[0]
	h := Hypothesis{Category: CatDeadRank, culprits: []int{first.Rank}}
	byPeer := deathKind(first) == diedUnrecorded && len(dead) > 1 && deathKind(dead[len(dead)-1]) == diedOfPeer
	collateral := map[int]bool{}
	for _, d := range deadHs {
		for _, r := range d.culprits {
			collateral[r] = true
		}
		for _, r := range rankset.Known(d.Collateral) {
			collateral[r] = true
		}
	}
	for _, f := range dead[1:] {
		collateral[f.Rank] = true
	}
	delete(collateral, first.Rank)
	var coll []int
	for r := range collateral {
		coll = append(coll, r)
	}
	sort.Ints(coll)
	h.Collateral = rankset.Format(coll)
	h.Evidence = []Evidence{{"agent", fmt.Sprintf("rank %d died first%s: %s", first.Rank, whenWords(first.EndedNS, 0), endingWords(first))}}
	for _, f := range dead[1:] {
		h.Evidence = append(h.Evidence, Evidence{"agent", fmt.Sprintf("then rank %d%s: %s", f.Rank, whenWords(f.EndedNS, first.EndedNS), endingWords(f))})
	}
	switch {
	case deathKind(first) == diedWaitingKind:
		h.Confidence = Low
		h.Evidence = append(h.Evidence, Evidence{"agent", "these ranks died of a collective's timeout: they waited for a peer that never entered it, so the first to time out is a victim, not the cause; the rank they waited for is the suspect"})
	case deathKind(first) == diedOfPeer:
		// Every recorded death says a peer went away (or the backend
		// aborted on what a peer sent): the cause is not among them.
		h.Confidence = Low
		h.Evidence = append(h.Evidence, Evidence{"agent", "every death here says a peer went away (a broken connection, or the backend aborting on what it received): the first cause is not among them; a mismatched collective or a rank of another node are the suspects"})
	case byPeer:
		// The others' records say a peer vanished; this one left none.
		h.Confidence = Medium
		h.Evidence = append(h.Evidence, Evidence{"agent", fmt.Sprintf("the ranks that recorded their end died of a broken connection to a peer; rank %d left no record: killed by a signal (SIGKILL, SIGSEGV, the OOM killer), it is the peer that vanished", first.Rank)})
	case first.EndedNS > 0 && len(dead) > 1 && dead[1].EndedNS > first.EndedNS && first.Raised:
		h.Confidence = High
	case first.EndedNS > 0 && (len(dead) == 1 || dead[1].EndedNS > first.EndedNS):
		h.Confidence = Medium
	default:
		h.Confidence = Low
		h.Evidence = append(h.Evidence, Evidence{"agent", "the order of these deaths is not known from the records (a rank killed by SIGKILL leaves none): the first to die may be another"})
	}
	said := map[string]bool{}
	for _, d := range deadHs {
		for _, e := range d.Evidence {
			if e.Source == "comm_rings" && !said[e.Text] {
				said[e.Text] = true
				h.Evidence = append(h.Evidence, e)
			}
		}
	}
	if first.Record != nil {
		h.whereThread = exceptionThread(first.Record.Exception)
	}
	mainThreadEnded(&h, first)
	h.Confirm = "list_processes {\"include_dead\":true}: each rank's ending, with its time"
	h.Refute = fmt.Sprintf("a rank that died before rank %d", first.Rank)
	return append(rest, h)
}

func inHyps(hs []Hypothesis, r int) bool {
	for _, h := range hs {
		for _, c := range h.culprits {
			if c == r {
				return true
			}
		}
	}
	return false
}

func whenWords(ns, since int64) string {
	switch {
	case ns <= 0:
		return " (when: not recorded)"
	case since > 0:
		return fmt.Sprintf(" (%s later)", ago(ns-since))
	}
	return ""
}

func endingWords(f *RankFacts) string {
	if f.Ending != "" {
		return f.Ending
	}
	return "it is gone and left no record of how it ended"
}

// How a rank died, in the order a culprit is looked for.
const (
	diedOwnCause = iota
	diedUnrecorded
	diedWaitingKind
	diedOfPeer
)

// timeoutWords and commWords: an exception that says a collective timed
// out (gloo's "Timed out waiting ...ms", NCCL's watchdog, c10d's store).
var (
	timeoutWords = []string{"timed out", "timeout", "timing out"}
	commWords    = []string{"gloo", "nccl", "collective", "c10d", "processgroup", "distbackenderror", "watchdog", "work"}
)

// diedWaiting: it raised because a collective it was inside timed out. It
// waited for a peer that never came: a victim of whoever never entered,
// not a cause (issue 22: rank 0, the first whose all_reduce timed out, was
// blamed for rank 3, which never issued it).
func diedWaiting(f *RankFacts) bool {
	if !f.Raised {
		return false
	}
	w := strings.ToLower(exceptionWords(f))
	if !containsAny(w, timeoutWords) {
		return false
	}
	if f.Record != nil {
		if t := exceptionThread(f.Record.Exception); t != nil && inCollective(t) {
			return true
		}
	}
	return containsAny(w, commWords)
}

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// peerErrors are the words of an exception that says a peer went away,
// as gloo, NCCL and sockets say it.
var peerErrors = []string{"connection reset by peer", "connection closed by peer", "broken pipe", "econnreset",
	"connection refused", "socket closed", "remote end closed", "peer closed", "transport endpoint is not connected",
	"read error", "nccl communicator was aborted", "connection was closed"}

func deathKind(f *RankFacts) int {
	switch {
	case f.Raised && peerError(exceptionWords(f)):
		return diedOfPeer
	case diedWaiting(f):
		return diedWaitingKind
	case stopped(f):
		// SIGTERM and no cause of its own: a launcher (torchrun, Slurm)
		// ends the other ranks once one fails; a consequence, not a cause.
		return diedOfPeer
	case f.Crash != nil && f.Crash.What == "Aborted" && f.Crash.Main != nil && inCollective(f.Crash.Main):
		// The backend aborted inside a collective (gloo's enforce on a
		// payload longer than it expected): it died of what a peer sent.
		return diedOfPeer
	case f.Raised || f.EndedNS > 0 || f.Crash != nil:
		return diedOwnCause
	}
	return diedUnrecorded
}

func peerError(s string) bool {
	s = strings.ToLower(s)
	for _, w := range peerErrors {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

func exceptionWords(f *RankFacts) string {
	if f.Record != nil && f.Record.Exception != nil {
		return f.Record.Exception.Type + ": " + f.Record.Exception.Message
	}
	return f.Ending
}

// mainThreadEnded: a rank whose main thread ended while threads kept it
// alive, until it was killed, is main_thread_dead: that ending, not the
// kill, is the story.
func mainThreadEnded(h *Hypothesis, f *RankFacts) {
	if r := f.Record; r != nil && r.MainThreadExit != nil {
		h.Category = CatMainThreadDead
		h.Evidence = append([]Evidence{{"agent", fmt.Sprintf("rank %d's main thread ended while non-daemon threads kept the process alive; it was killed later", f.Rank)}}, h.Evidence...)
	}
}

// stopped: it received SIGTERM and recorded no exception or crash of its
// own (the launcher's stop).
func stopped(f *RankFacts) bool {
	return !f.Alive && !f.Raised && f.Crash == nil && f.Record != nil && slices.Contains(f.Record.Signals, "SIGTERM")
}
