package diagnosis

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// Categories of a hypothesis (issue 10's exact names).
const (
	CatCPUStall       = "cpu_stall"
	CatMissing        = "missing_from_collective"
	CatMismatch       = "collective_mismatch"
	CatDeadRank       = "dead_rank"
	CatMainThreadDead = "main_thread_dead"
	CatDeadlock       = "deadlock"
	CatGILHeld        = "gil_held"
	CatAllIn          = "all_in_collective"
	CatStraggler      = "straggler"
	CatUnreachable    = "unreachable_rank"
	CatHealthy        = "healthy"
	// CatGPUFault: the culprit's GPU failed (a critical Xid, lost, an
	// uncorrectable memory error) under a stalled or dead job (gpu.go).
	CatGPUFault = "gpu_fault"
)

// Confidence levels.
const (
	High   = "high"
	Medium = "medium"
	Low    = "low"
)

// RankFacts is what is known of one rank besides its collectives.
type RankFacts struct {
	Rank  int
	PID   int
	Alive bool
	// Ending says how it ended, from its agent's records ("" unknown);
	// Raised: it recorded an uncaught exception.
	Ending string
	Raised bool
	// Main is its main thread's stack, when one was captured.
	Main *stacks.Thread
	// MainCapturedNS: a dead rank's Main is the watcher's capture of
	// then, not the stack it died with (evidence.RankEvidence's).
	MainCapturedNS int64
	Activity       *evidence.RankActivity
	// NowNS is the rank's clock (Unix ns) when its evidence was read.
	NowNS int64
	// Threads, StackSource, StackErr, AgentErr, OSThreads, Record and
	// EndedNS are evidence.RankEvidence's (threads.go reads them).
	Threads     []stacks.Thread
	StackSource string
	StackErr    string
	AgentErr    string
	OSThreads   []stacks.Thread
	Record      *procfacts.Ending
	Crash       *evidence.Crash // what faulthandler wrote as a fatal signal killed it
	EndedNS     int64
	// Node is the node daemon's address that gave its evidence ("" when
	// read here); LocalRank its rank on its node, -1 unknown. They find
	// its GPU (gpu.go).
	Node      string
	LocalRank int
	// LockWait: it is blocked taking a file lock that LockWait.Holder
	// (a pid, on its node) holds.
	LockWait *procfacts.LockWait
	// Waits: its main thread waits for a child process or in a read or
	// an open, and on what (children.go).
	Waits *evidence.Waits
	// Samples are more samples of its main thread, taken after Main, a
	// moment apart (Run takes them for a moving job whose collectives no
	// ring records: the one way to see its straggler).
	Samples []*stacks.Thread
}

// Input is everything Diagnose weighs; the evidence service builds it.
type Input struct {
	// World is the job's size from the agents' identities, 0 when no
	// agent said.
	World int
	Ranks map[int]*RankFacts
	Comm  []evidence.CommRow
	// Problems are the sources that failed or were partial; Conflicts
	// the sources that disagree (no verdict above medium then).
	Problems  []string
	Conflicts []string
	// FR is the Flight Recorder analysis of the ranks in FRRanks, if any.
	FR      *fr.Report
	FRRanks []int
	State   StateOptions
	// Unreachable: ranks no source could reach (their node did not
	// answer), and why.
	Unreachable map[int]string
	// GPU is each node's GPUs (evidence.Bundle.GPU); nil: not read, and
	// the verdict is the one without GPU evidence.
	GPU []gpu.Report

	// Set by diagnose: each rank's view (story.go) once the model is
	// built, and how many outermost frames every main thread shares.
	stories map[int]*rankStory
	shared  int
}

// Evidence is one line of proof and where it came from.
type Evidence struct {
	Source string `json:"source"` // comm_rings, stacks, agent, membership
	Text   string `json:"text"`
}

// Where is the innermost frame of the culprit's own code.
type Where struct {
	File     string `json:"file"`
	Line     int    `json:"line"`
	Function string `json:"function"`
	// Source is the line itself, when the job's user could read the file.
	Source string `json:"source,omitempty"`
}

// String names the place in a line: the file and function are the job's
// text, quoted.
func (w *Where) String() string {
	return fmt.Sprintf("%s:%d (%s)", jobtext.QuoteTail(path.Base(w.File), jobtext.Name), w.Line, jobtext.Quote(w.Function, jobtext.Func))
}

// Hypothesis is one explanation, with its proof and how to test it.
type Hypothesis struct {
	Category   string     `json:"category"`
	Culprits   string     `json:"culprit_ranks"`
	Collateral string     `json:"collateral_ranks,omitempty"`
	Confidence string     `json:"confidence"`
	Evidence   []Evidence `json:"evidence"`
	Where      *Where     `json:"where,omitempty"`
	Confirm    string     `json:"confirm"`
	Refute     string     `json:"refute"`
	// Act is what to do once confirmed, as far as the evidence says
	// (next.go); empty when it says nothing. The text says it as "then:".
	Act string `json:"act,omitempty"`

	culprits, collateral []int
	group                string // the group of an all-in-collective sink
	// whereThread, when set, is the thread whose innermost user frame is
	// the where (else the culprit's main thread).
	whereThread *stacks.Thread
	// waits is what the culprit waits for outside collectives, for the
	// summary (children.go).
	waits string
}

// Report is the verdict.
type Report struct {
	State      string       `json:"state"`
	StateWhy   string       `json:"state_why"`
	Summary    string       `json:"summary"`
	Hypotheses []Hypothesis `json:"hypotheses"`
	// Ranks groups the ranks by what each is doing, odd ones out first.
	Ranks       []RankGroup `json:"ranks"`
	DataQuality []string    `json:"data_quality,omitempty"`
	// Omitted says what Bound cut from the lists above.
	Omitted []string `json:"omitted,omitempty"`

	// doing is each rank's line, for the paged per-rank listing.
	doing map[int]string
	// pic is what the verdict was drawn from, for a picture (picture.go).
	pic *WaitPicture
}

// RankGroup is the ranks that do the same thing.
type RankGroup struct {
	Ranks string `json:"ranks"`
	Count int    `json:"count"`
	Doing string `json:"doing"`
}

// Diagnose decides first whether the job moves, and only for a stalled or
// dead job follows the wait-for graph to its sinks. Sources that disagree
// hold every verdict at medium confidence at most, and are said.
func Diagnose(in Input) Report {
	rep := diagnose(in)
	withPicture(&rep, in)
	if len(in.Conflicts) > 0 {
		atMostMedium(rep.Hypotheses)
		for _, c := range in.Conflicts {
			rep.DataQuality = append(rep.DataQuality, "sources disagree: "+c)
		}
		rep.Summary = strings.Replace(rep.Summary, "high confidence", "medium confidence", 1)
	}
	if onReport != nil {
		onReport(rep)
	}
	return rep
}

// onReport, when set (by the package's tests), sees every report
// Diagnose makes: story_test.go checks each for a rank two parts of one
// answer place differently.
var onReport func(Report)

func diagnose(in Input) Report {
	in.shared = sharedFrames(in)
	ps := progressOf(in)
	if len(in.Ranks) == 0 {
		return Report{State: StateUnknown, StateWhy: "no rank of a job was found: no agent identity, no ring",
			Summary:     "No training job found on this node: nothing to diagnose (is the job running with PROBING=1, and are PROBING_DATA_DIR and PROBING_CTRL_ROOT the job's?).",
			Hypotheses:  []Hypothesis{},
			DataQuality: in.Problems}
	}
	js := Classify(ps, in.State)
	if js.State == StateHealthy || js.State == StateProgressing {
		if slow, why := waitStragglers(in.Comm, js.Step); len(slow) > 0 {
			js.State, js.Slow, js.Why = StateSlow, slow, js.Why+"; but "+why
		} else if slow, why := frStragglers(in); len(slow) > 0 {
			js.State, js.Slow, js.Why = StateSlow, slow, js.Why+"; but "+why
		}
	}
	pause := likelyPause(in, js)
	if pause != "" {
		js.State, js.Why = StatePaused, js.Why+"; "+pause
	}
	rep := Report{State: js.State, StateWhy: js.Why, DataQuality: append([]string(nil), in.Problems...)}
	if missing := absentRanks(in); len(missing) > 0 {
		rep.DataQuality = append(rep.DataQuality, fmt.Sprintf("%s of the job's %d: no agent and no ring here (on another node, not started, or not probed): not judged",
			rankWords(missing), in.World))
	}
	switch js.State {
	case StateHealthy, StateProgressing, StateSlow, StatePaused:
		rep.doing = movingDoing(in, js)
		rep.Ranks = groupDoing(rep.doing)
	}
	switch js.State {
	case StatePaused:
		h := Hypothesis{Category: CatHealthy, Confidence: Medium, Evidence: []Evidence{{"progress", pause}},
			Confirm: "call again in a while: a pause ends with the steps coming back; past the limit it is a stall and the culprit is named",
			Refute:  "a rank asleep in a wait while the others are busy, or a collective pending"}
		rep.Hypotheses = []Hypothesis{h}
		rep.Summary = "No hang yet: " + pause + "."
		return rep
	case StateHealthy, StateProgressing:
		conf := High
		if js.State == StateProgressing {
			conf = Medium // moving, but its pace could not be judged
		}
		h := Hypothesis{Category: CatHealthy, Confidence: conf, Evidence: []Evidence{{"progress", js.Why}},
			Confirm: "call again in a while: the steps keep coming", Refute: "a rank whose last activity stops advancing"}
		rep.Summary = "No hang: " + js.Why + "."
		if js.Quiet > 0 {
			// Every rank silent for several steps: the start of a stall
			// looks exactly like this, so no confident all-clear.
			h.Confidence = Low
			quiet := fmt.Sprintf("but no rank has made progress for %s (%.0f× the typical step of %s): a pause or a stall in the making; past %s it is a stall",
				js.Quiet.Round(time.Millisecond), float64(js.Quiet)/float64(js.Step), js.Step.Round(time.Millisecond), js.Threshold.Round(time.Millisecond))
			h.Evidence = append(h.Evidence, Evidence{"progress", quiet})
			h.Confirm = fmt.Sprintf("call again in %s: if still no rank has moved, it is a stall and the culprit is named", (js.Threshold-js.Quiet).Round(time.Second)+time.Second)
			rep.Summary = "No hang yet: " + js.Why + "; " + quiet + "."
		}
		rep.Hypotheses = []Hypothesis{h}
		// No collective recorded in the recent steps (DDP and FSDP issue
		// theirs from C++): every rank steps at the slowest one's pace, and
		// who that is cannot be read from the steps. A stack sample with
		// most ranks waiting in one call and one elsewhere says who it may
		// be. Either way, no confident all-clear.
		if near := frNearStraggler(in); near != "" {
			// One rank late in most collectives, under the bar: the
			// all-clear is held at medium and says why.
			if rep.Hypotheses[0].Confidence == High {
				rep.Hypotheses[0].Confidence = Medium
			}
			rep.Hypotheses[0].Evidence = append(rep.Hypotheses[0].Evidence, Evidence{"flight_recorder", near})
			rep.Hypotheses[0].Confirm = "call again in a while: a straggler's lag grows past the bar and it is named; the steps keep coming either way"
		}
		noRecent, hint := !recentCollectives(in, js), stackStraggler(in)
		if sampled(in) && hint == nil {
			// Sampled again because the first sample hinted at a straggler,
			// and no rank was elsewhere in every sample: not excluded.
			rep.Hypotheses[0].Evidence = append(rep.Hypotheses[0].Evidence, Evidence{"stacks", "in several stack samples the ranks wait in one call in some, but no rank is elsewhere in all of them: no straggler shows, none is excluded"})
		}
		if noRecent || hint != nil || sampled(in) {
			if rep.Hypotheses[0].Confidence == High {
				rep.Hypotheses[0].Confidence = Medium
			}
			if noRecent {
				rep.Hypotheses[0].Evidence = append(rep.Hypotheses[0].Evidence, Evidence{"comm_rings", noRecentLine})
			}
			if hint != nil && hint.Confidence != Low {
				// The same rank elsewhere in every sample: the straggler.
				h := finish(*hint, in)
				rep.State, rep.StateWhy = StateSlow, js.Why+"; but "+hint.Evidence[0].Text
				rep.Summary = fmt.Sprintf("No hang, but a straggler: %s; %s.", rankWords(h.culprits), hint.Evidence[0].Text)
				rep.Hypotheses = []Hypothesis{h}
			} else if hint != nil {
				rep.Hypotheses = append(rep.Hypotheses, finish(*hint, in))
			}
		}
		rep.DataQuality = append(rep.DataQuality, gpuMoving(in)...)
		return rep
	case StateSlow:
		h := Hypothesis{Category: CatStraggler, culprits: js.Slow, Confidence: Medium,
			Evidence: []Evidence{{"progress", js.Why}},
			Confirm:  "run the slow_rank or persistent_straggler skill over a longer window",
			Refute:   "the same ranks are not slow in the next window"}
		rep.Hypotheses = []Hypothesis{finish(h, in)}
		rep.Summary = fmt.Sprintf("No hang, but a straggler: %s; %s.", rankWords(js.Slow), js.Why)
		rep.DataQuality = append(rep.DataQuality, gpuMoving(in)...)
		return rep
	}
	m, problems := FromComm(in.Comm, in.World)
	rep.DataQuality = append(rep.DataQuality, problems...)
	// Post-mortem: when every rank is gone, the rings hold the picture as
	// it stood when they died (who was in which collective); marking them
	// all dead would leave no chain to follow.
	postMortem := len(js.Dead) > 0 && len(js.Dead) == len(in.Ranks)
	if postMortem {
		rep.DataQuality = append(rep.DataQuality, "post-mortem: every rank's process is gone; the collectives are as the rings left them")
	}
	for r, f := range in.Ranks {
		rk := m.Ranks[r]
		if rk == nil {
			rk = &Rank{Rank: r, Status: NoEvidence, Issued: map[string]int64{}}
			m.Ranks[r] = rk
		}
		switch {
		case !f.Alive && diedWaiting(f) && len(rk.History) > 0:
			// It died of the timeout of the collective its rings end in
			// (the wrapper closed the row as it raised): as it died it was
			// waiting there, for the members that never entered.
			op := rk.History[len(rk.History)-1]
			rk.Status, rk.In = InCollective, &op
		case !f.Alive && (!postMortem || f.Raised):
			// Post-mortem too, a rank that died of its own exception is
			// dead, not stuck where its rings stopped.
			rk.Status, rk.In = Dead, nil
		case rk.Status == NoEvidence && hasThreads(f):
			rk.Status = Running // its stack shows where it is, outside any recorded collective
		}
	}
	if placed := unflushedWaits(&m, in); len(placed) > 0 {
		rep.DataQuality = append(rep.DataQuality, fmt.Sprintf("%s: the stack is inside a collective whose ring row was not written (the call it is in, or died in, came after the last flush): taken from the stack", rankWords(placed)))
	}
	if placed := asyncP2PWaits(&m, in); len(placed) > 0 {
		rep.DataQuality = append(rep.DataQuality, fmt.Sprintf("%s: asleep in the job's own code after launching point-to-point calls a peer has not matched (their rows record the launch only): taken to wait in the oldest of them", rankWords(placed)))
	}
	stackNote := -1 // the stack-waits line, said again once the verdict is known
	if note := stackWaits(&m, in); note != "" {
		stackNote = len(rep.DataQuality)
		rep.DataQuality = append(rep.DataQuality, note)
	}
	g := WaitFor(m)
	rep.pic = &WaitPicture{Model: &m, Graph: &g}
	in.stories = buildStories(m, g, in)
	rep.doing = storyDoing(in.stories)
	rep.Ranks = groupDoing(rep.doing)
	mismatches := FindMismatches(in.Comm, in.World)
	for _, s := range g.Sinks {
		h := hypothesisOf(s, in, g)
		switch s.Kind {
		case SinkCPU:
			h = refineCPU(h, s, in) // threads.go: deadlock, GIL, main thread gone
		case SinkAllIn:
			h = refineAllIn(h, s, mismatches)
		}
		rep.Hypotheses = append(rep.Hypotheses, h)
	}
	rep.Hypotheses = orderDeaths(rep.Hypotheses, in)
	rep.Hypotheses = mergeMismatches(rep.Hypotheses, mismatches)
	rep.Hypotheses = mismatchDeaths(rep.Hypotheses, in, mismatches)
	rep.Hypotheses = mergeSameWait(rep.Hypotheses, in)
	rep.Hypotheses = fileLocks(rep.Hypotheses, in, m)
	rep.Hypotheses = subCauses(rep.Hypotheses, in)
	rep.Hypotheses = append(rep.Hypotheses, threadHypotheses(rep.Hypotheses, in, m)...)
	rep.Hypotheses = mergeUnreachable(rep.Hypotheses, in)
	for i := range rep.Hypotheses {
		h := finish(rep.Hypotheses[i], in)
		if postMortem && h.Category == CatCPUStall {
			// No process to ask: what it left says where it was.
			h.Confirm = fmt.Sprintf("rank %d's last rows in python.comm_collective (query), and its stack if one was dumped on the way out (.stacks.txt, .signal.*.txt in its data dir entry, or the job's log)", h.culprits[0])
			h.Refute = fmt.Sprintf("rank %d's rings show it entered the collectives its peers wait in", h.culprits[0])
		}
		rep.Hypotheses[i] = h
	}
	rep.Hypotheses = withFlightRecorder(rep.Hypotheses, in)
	rep.Hypotheses = withDeadSnapshots(rep.Hypotheses, in) // deaths_fr.go
	if c := frCoverage(in); c != "" {
		rep.DataQuality = append(rep.DataQuality, c)
	}
	var gpuNotes []string
	rep.Hypotheses, gpuNotes = withGPU(rep.Hypotheses, in, js)
	rep.DataQuality = append(rep.DataQuality, gpuNotes...)
	for i, h := range rep.Hypotheses {
		if fromStacks(h, m) {
			rep.Hypotheses[i] = stackSourced(h, js.State == StateUnknown)
		}
	}
	if len(rep.Hypotheses) == 0 && js.State == StateUnknown {
		h := Hypothesis{Category: CatUnreachable, Confidence: Low,
			Evidence: []Evidence{{"progress", "nothing times this job (no step, collective or span recorded) and no rank is seen waiting for another (none in a collective, none blocked where most others are): the state is unknown, not healthy"}},
			Confirm:  "get_stacks twice, a few seconds apart: frames that do not move are where the job is stuck; trace the steps (probing_mcp_agent.span) or record the collectives (record_collective) so the next answer has a clock",
			Refute:   "the frames move between the two samples"}
		rep.Hypotheses = []Hypothesis{finish(h, in)}
	}
	if len(rep.Hypotheses) == 0 {
		h := Hypothesis{Category: CatUnreachable, Confidence: Low,
			Evidence: []Evidence{{"comm_rings", "no rank is recorded inside a collective, and nothing shows who waits for whom"}},
			Confirm:  "get_stacks on every rank, and snapshot_flight_recorder",
			Refute:   "a rank recorded inside a collective"}
		if postMortem {
			h.Evidence[0].Text = "when the processes ended, no rank was recorded waiting for another: the job was moving (or between collectives) when it was stopped, so its end, not a hang, is the question"
			h.Confirm = "list_processes {\"include_dead\":true}: how each rank ended; the job's log"
			h.Refute = "a rank's rings show it inside a collective its peers never entered"
		}
		rep.Hypotheses = []Hypothesis{finish(h, in)}
	}
	if js.Young {
		atMostMedium(rep.Hypotheses) // a young stall may still be a pause
		rep.DataQuality = append(rep.DataQuality, "the stall is young (under the stall_seconds of a confident verdict): call again later to confirm it lasts")
	}
	sort.SliceStable(rep.Hypotheses, func(i, j int) bool {
		return confRank(rep.Hypotheses[i].Confidence) < confRank(rep.Hypotheses[j].Confidence)
	})
	if stackNote >= 0 && len(rep.Hypotheses) > 0 && rep.Hypotheses[0].Confidence == High {
		// The top verdict rests on more than the stacks (the Flight
		// Recorder's sequence numbers, a death, a lock): the cap the line
		// announces did not bind it, and saying it would contradict it.
		rep.DataQuality[stackNote] = strings.Replace(rep.DataQuality[stackNote], stackCap, "The top verdict rests on more than these stacks (its evidence says which sources), so their medium-confidence cap does not bind it", 1)
	}
	if postMortem {
		deadConfirms(rep.Hypotheses)
	}
	withNextSteps(rep.Hypotheses, in, postMortem)
	if n := twoNumberings(rep); n != "" {
		rep.DataQuality = append(rep.DataQuality, n)
	}
	rep.Summary = summary(rep.Hypotheses[0], js)
	if len(rep.Hypotheses) > 1 {
		rep.Summary += fmt.Sprintf(" %d other hypothes(es) below.", len(rep.Hypotheses)-1)
	}
	return rep
}

// sampled: Run took more stack samples of the job.
func sampled(in Input) bool {
	for _, f := range in.Ranks {
		if len(f.Samples) > 0 {
			return true
		}
	}
	return false
}

// noRecentLine says that a moving job's collectives are not in the rings
// (Run takes more stack samples when it reads it).
const noRecentLine = "no collective is recorded in the recent steps (DDP and FSDP issue theirs from C++): the ranks step together at the slowest one's pace, so a straggler would look the same"

// recentCollectives: some rank's rings recorded a collective within its
// last few steps. DDP and FSDP issue theirs from C++ (only set-up calls
// such as the first broadcast are seen), so their steps come with none.
func recentCollectives(in Input, js JobState) bool {
	if js.Step <= 0 {
		return len(in.Comm) > 0
	}
	for _, f := range in.Ranks {
		a := f.Activity
		if a == nil {
			continue
		}
		if len(a.Steps) == 0 {
			if a.LastComm > 0 {
				return true // its steps are its collectives' rhythm
			}
			continue
		}
		last := a.Steps[len(a.Steps)-1] // µs
		if seen := max(a.LastComm, a.LastCommDone); seen > 0 && last-seen <= 3*js.Step.Microseconds() {
			return true
		}
	}
	return false
}

// collectiveCadence is, per rank, the times (ns) it entered its most
// frequent group's collectives, oldest first: one entry per round of a
// program that repeats.
func collectiveCadence(rows []evidence.CommRow) map[int][]int64 {
	count := map[int]map[string]int{}
	for _, r := range rows {
		if count[r.Rank] == nil {
			count[r.Rank] = map[string]int{}
		}
		count[r.Rank][r.Ranks]++
	}
	out := map[int][]int64{}
	for rank, c := range count {
		best, n := "", -1
		for g, k := range c {
			if k > n || (k == n && g < best) {
				best, n = g, k
			}
		}
		for _, r := range rows {
			if r.Rank == rank && r.Ranks == best {
				out[rank] = append(out[rank], r.TimestampUS*1000)
			}
		}
	}
	return out
}

func hypothesisOf(s Sink, in Input, g Graph) Hypothesis {
	h := Hypothesis{culprits: s.Ranks, collateral: g.Collateral, Collateral: rankset.Format(g.Collateral)}
	where := "collectives"
	if g.P2P {
		where = "collectives or point-to-point calls"
	}
	waiters := fmt.Sprintf("%d rank(s) wait for it in %s (%s)", len(g.Collateral), where, shortSet(rankset.Format(g.Collateral)))
	switch s.Kind {
	case SinkDiverged:
		h.Category, h.Confidence = CatMissing, High
		h.Evidence = []Evidence{{"comm_rings", s.Why}, {"comm_rings", waiters}}
		h.Confirm = fmt.Sprintf("snapshot_flight_recorder: rank %d's ring has %s and no %s", s.Ranks[0], s.At, s.Skipped)
		h.Refute = fmt.Sprintf("rank %d entered %s after all", s.Ranks[0], s.Skipped)
		if _, _, ok := p2pChannel(s.Skipped.Group); ok {
			h.Confirm = "query: SELECT _rank, op, peer, max(group_seq) AS messages FROM python.comm_collective WHERE peer >= 0 GROUP BY _rank, op, peer: each pair's sends and receives, and the one short"
		}
	case SinkCPU:
		h.Category, h.Confidence = CatCPUStall, Medium
		h.Evidence = []Evidence{{"comm_rings", s.Why + "; the collectives it is waited for in were never entered by it"}, {"comm_rings", waiters}}
		if st := in.storyOf(s.Ranks[0]); st != nil && st.FR != nil {
			// In no collective the rings record, but in one they do not
			// see (DDP's, issued from C++): said so, not "in none".
			h.Evidence[0].Text = fmt.Sprintf("rank %d is in no collective the rings record (its %s); the collectives it is waited for in were never entered by it", s.Ranks[0], st.FR)
		}
		if f := in.Ranks[s.Ranks[0]]; f != nil && f.Main != nil {
			h.Confidence = High
			h.Evidence = append(h.Evidence, Evidence{"stacks", mainWords(in, s.Ranks[0], f.Main)})
		}
		h.Confirm = fmt.Sprintf("get_stacks {\"ranks\":\"%d\"} twice, a few seconds apart: the same frame", s.Ranks[0])
		h.Refute = fmt.Sprintf("rank %d's main thread moves, or is inside a collective", s.Ranks[0])
	case SinkDead:
		h.Category, h.Confidence = CatDeadRank, Medium
		h.Evidence = []Evidence{{"agent", s.Why}, {"comm_rings", waiters}}
		if f := in.Ranks[s.Ranks[0]]; f != nil && f.Ending != "" {
			h.Confidence = High
			h.Evidence = append(h.Evidence, Evidence{"agent", fmt.Sprintf("rank %d %s", s.Ranks[0], f.Ending)})
		}
		h.Confirm = "list_processes {\"include_dead\":true}: how it ended"
		h.Refute = "the process is alive after all"
	case SinkNoData:
		h.Category, h.Confidence = CatUnreachable, Medium
		why := s.Why
		if u := in.Unreachable[s.Ranks[0]]; u != "" {
			why = fmt.Sprintf("rank %d could not be reached: %s", s.Ranks[0], u)
		}
		h.Evidence = []Evidence{{"membership", why}, {"comm_rings", waiters}}
		h.Confirm = fmt.Sprintf("list_processes; get_stacks {\"ranks\":\"%d\"}", s.Ranks[0])
		h.Refute = "the rank answers and is inside the collective its peers wait in"
	case SinkAllIn:
		h.Category, h.Confidence = CatAllIn, Medium
		h.Collateral, h.collateral = "", nil
		if s.At != nil {
			h.group = s.At.Group
		}
		h.Evidence = []Evidence{{"comm_rings", s.Why + ": none is missing, so the wait is below the ranks (network, NCCL, a GPU)"}}
		h.Confirm = "snapshot_flight_recorder (every member shows it started, none completed); the GPUs' state"
		h.Refute = "a member that has not entered it"
	default: // an undecided cycle
		h.Category, h.Confidence = CatMissing, Low
		h.Evidence = []Evidence{{"comm_rings", s.Why}, {"comm_rings", waiters}}
		h.Confirm = "compare these ranks' recent collectives in python.comm_collective: the one whose order differs is the culprit"
		h.Refute = "their orders agree"
	}
	return h
}

// finish names the culprits, adds where the first one is, and lowers the
// confidence when a source contradicts the hypothesis.
func finish(h Hypothesis, in Input) Hypothesis {
	sort.Ints(h.culprits)
	h.Culprits = rankset.Format(h.culprits)
	if len(h.culprits) == 0 {
		return h
	}
	f := in.Ranks[h.culprits[0]]
	if f == nil {
		return h
	}
	if t := h.whereThread; t != nil {
		if t.IsMain {
			t = &stacks.Thread{Frames: ownFrames(t, in.shared)}
		}
		h.Where = userFrame(t)
	}
	if f.Main == nil {
		return h
	}
	if h.Where == nil {
		h.Where = userFrame(&stacks.Thread{Frames: ownFrames(f.Main, in.shared)})
	}
	if h.Category == CatCPUStall && inCollective(f.Main) {
		if s := in.storyOf(f.Rank); s != nil && s.FR != nil {
			// Not a contradiction: the call is one the rings do not see.
			h.Evidence = append(h.Evidence, Evidence{"stacks", "its main thread is inside torch.distributed, in " + s.FR.String() + ", which the rings do not record"})
		} else {
			h.Confidence = Low
			h.Evidence = append(h.Evidence, Evidence{"stacks", "but its main thread's stack is inside torch.distributed: the rings and the stack disagree"})
		}
	}
	if h.Category == CatCPUStall && inBackward(f.Main) && len(h.collateral) > 0 {
		// Its main thread waits in backward, where DDP's gradient
		// all_reduce (issued from C++, in no ring) is waited for, while its
		// peers wait in a collective it never entered: it went on to DDP's
		// instead (the rank-local condition around a collective). A
		// backward that only computes looks the same from here: medium.
		h.Category = CatMissing
		if h.Confidence == High {
			h.Confidence = Medium
		}
		h.Evidence = append(h.Evidence, Evidence{"stacks", "its main thread waits in autograd's backward, where DDP's gradient all_reduce (issued from C++, in no ring) is waited for: it went past the collective its peers wait in to that one (or its backward never ends: a stuck custom op)"})
	}
	return h
}

func summary(h Hypothesis, js JobState) string {
	where := ""
	if h.Where != nil {
		where = " at " + h.Where.String()
	}
	if h.waits != "" {
		where += ", " + h.waits
	}
	who := "rank " + h.Culprits
	if len(h.culprits) > 1 {
		who = "ranks " + h.Culprits
	}
	var s string
	switch {
	case len(h.culprits) == 0:
		s = fmt.Sprintf("No culprit found (%s, %s confidence): %s", h.Category, h.Confidence, h.Evidence[0].Text)
	case h.Category == CatMissing || h.Category == CatMismatch || h.Category == CatGPUFault:
		s = fmt.Sprintf("%s is the culprit (%s, %s confidence)%s: %s", who, h.Category, h.Confidence, where, h.Evidence[0].Text)
	case h.Category == CatAllIn:
		s = fmt.Sprintf("Every rank is inside the same collective (%s, %s confidence): the hang is below the ranks", h.Category, h.Confidence)
	default:
		s = fmt.Sprintf("%s is the culprit (%s, %s confidence)%s", who, h.Category, h.Confidence, where)
	}
	if h.Collateral != "" {
		s += "; ranks " + shortSet(h.Collateral) + " wait for it"
	}
	return s + ". The job is " + js.State + ": " + js.Why + "."
}

func confRank(c string) int {
	switch c {
	case High:
		return 0
	case Medium:
		return 1
	}
	return 2
}

func rankWords(rs []int) string {
	if len(rs) == 1 {
		return "rank " + rankset.Format(rs)
	}
	return "ranks " + shortSet(rankset.Format(rs))
}

func sortedFacts(m map[int]*RankFacts) []*RankFacts {
	out := make([]*RankFacts, 0, len(m))
	for _, f := range m {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}

// FromBundle is the Input of the evidence the service gathered.
func FromBundle(b *evidence.Bundle, st StateOptions) Input {
	in := Input{World: b.World, Ranks: map[int]*RankFacts{}, Comm: b.Comm, Problems: b.Problems, Conflicts: b.Conflicts,
		FR: b.FR, FRRanks: b.FRRanks, State: st, Unreachable: b.Unreachable}
	for r, e := range b.Ranks {
		in.Ranks[r] = &RankFacts{Rank: e.Rank, PID: e.PID, Alive: e.Alive, Ending: e.Ending, Raised: e.Raised, Main: e.Main, Activity: e.Activity, NowNS: e.NowNS,
			Threads: evidence.WithLocks(e.Threads, e.Locks), StackSource: e.StackSource, StackErr: e.StackErr, AgentErr: e.AgentErr, OSThreads: e.OSThreads,
			Record: e.Record, EndedNS: e.EndedNS, MainCapturedNS: e.MainCapturedNS, Crash: e.Crash, Node: e.Node, LocalRank: -1, LockWait: e.LockWait, Waits: e.Waits}
		if e.LocalRank != nil {
			in.Ranks[r].LocalRank = *e.LocalRank
		}
	}
	in.GPU = b.GPU
	return in
}

// absentRanks are the job's ranks (from its world size) of which nothing
// was found.
func absentRanks(in Input) []int {
	var out []int
	for r := 0; r < min(in.World, evidence.MaxWorld); r++ {
		if in.Ranks[r] == nil {
			out = append(out, r)
		}
	}
	return out
}

func atMostMedium(hs []Hypothesis) {
	for i := range hs {
		if hs[i].Confidence == High {
			hs[i].Confidence = Medium
		}
	}
}

// mergeUnreachable folds the hypotheses of ranks whose node did not
// answer into one: a dead node of a large job is one fact (its ranks
// could not be asked), not one hypothesis per rank crowding out the rest.
func mergeUnreachable(hs []Hypothesis, in Input) []Hypothesis {
	var out []Hypothesis
	var merged *Hypothesis
	why := map[string][]int{}
	var order []string
	for _, h := range hs {
		if h.Category != CatUnreachable || len(h.culprits) != 1 || in.Unreachable[h.culprits[0]] == "" {
			out = append(out, h)
			continue
		}
		r := h.culprits[0]
		u := in.Unreachable[r]
		if why[u] == nil {
			order = append(order, u)
		}
		why[u] = append(why[u], r)
		if merged == nil {
			m := h
			m.culprits = nil
			m.Evidence = nil
			merged = &m
			for _, e := range h.Evidence {
				if e.Source != "membership" {
					m.Evidence = append(m.Evidence, e)
				}
			}
		}
		merged.culprits = append(merged.culprits, r)
	}
	if merged == nil {
		return hs
	}
	var lines []Evidence
	for i, u := range order {
		if i == 3 {
			lines = append(lines, Evidence{"membership", fmt.Sprintf("and %d more node(s) that did not answer", len(order)-i)})
			break
		}
		lines = append(lines, Evidence{"membership", fmt.Sprintf("ranks %s could not be reached: %s", rankset.Format(why[u]), u)})
	}
	merged.Evidence = append(lines, merged.Evidence...)
	sort.Ints(merged.culprits)
	merged.Confirm = "list_cluster_nodes: why those nodes do not answer; get_stacks on their ranks once their daemons answer"
	merged.Refute = "the nodes answer, and their ranks are inside the collective their peers wait in"
	return append(out, *merged)
}
