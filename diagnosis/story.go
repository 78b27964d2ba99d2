package diagnosis

import (
	"fmt"
	"sort"
	"strings"
	"time"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// One story per answer. Each rank's reconciled view (rankStory) is built
// once, after the wait-for model has every placement (rings, unflushed
// rows, stacks), and joined there with the Flight Recorder: every part of
// the report that says where a rank is (its line under Ranks, the
// hypotheses' evidence, the summary) says it from this view, so two parts
// of one answer cannot disagree about a rank. A sequence number always
// says whose it is: the rings count the calls the agent saw this process
// make on a group (ringsCount), the Flight Recorder numbers every
// collective of the process group, DDP's from C++ too (frSeq).

// Whose sequence number, said after it.
const (
	ringsCount = "rings' count"
	frSeq      = "Flight Recorder's seq"
)

// rankStory is one rank's reconciled view.
type rankStory struct {
	Rank   int
	Status Status
	// In is the collective the model places it in (rings, or its stack).
	In *Op
	// FR is its pending op in the Flight Recorder, nil when none.
	FR *frWait
	// WaitsFor are the ranks it waits for (the wait-for graph's edges).
	WaitsFor []int
	// Main is its main thread's newest stack: live, or the one it left
	// as it ended (Alive false), EndedAgo before this read (0 unknown).
	Main     *stacks.Thread
	Alive    bool
	EndedAgo time.Duration
	// CapturedAgo: Main is the watcher's capture of this long before this
	// read, not the stack it ended with (0: it is).
	CapturedAgo time.Duration
	Ending      string
	SharedLen   int // outermost frames every rank shares (sharedFrames)
}

// frWait is a collective the Flight Recorder shows a rank has enqueued
// and not completed.
type frWait struct {
	Group  string // members, as the rings name groups
	PGName string
	Name   string
	Seq    int64
	// Since is how long before this read it was enqueued (0 unknown);
	// Timeout the process group's timeout (0 not recorded).
	Since, Timeout time.Duration
}

// String names the op with its numbering: "all_reduce #20 on group 0-3
// (Flight Recorder's seq)".
func (w *frWait) String() string {
	return fmt.Sprintf("%s #%d on group %s (%s)", jobtext.Token(w.Name, jobtext.Name), w.Seq, jobtext.Token(w.Group, jobtext.Name), frSeq)
}

// TimesOutIn is how long until the process group's timeout ends the
// wait, false when the Flight Recorder does not say.
func (w *frWait) TimesOutIn() (time.Duration, bool) {
	if w == nil || w.Timeout <= 0 || w.Since <= 0 {
		return 0, false
	}
	return w.Timeout - w.Since, true
}

// frWaits is, per rank, its oldest pending op in the Flight Recorder
// (the first process group listing one: the analysis orders them worst
// first).
func frWaits(in Input) map[int]*frWait {
	out := map[int]*frWait{}
	if in.FR == nil {
		return out
	}
	ref := in.FR.Ranks.ReferenceTimeNs
	for _, pg := range in.FR.ProcessGroups {
		for _, l := range pg.LaggingRanks {
			p := l.Pending
			if p == nil || out[l.Rank] != nil || strings.EqualFold(p.State, "completed") {
				continue
			}
			w := &frWait{Group: pg.MembersText, PGName: pg.PGName, Name: frOpName(p.ProfilingName), Seq: p.Seq,
				Timeout: time.Duration(p.TimeoutMs) * time.Millisecond}
			// Its age is counted to the dumps' latest event; the rank's
			// own clock at this read carries it to now.
			if f := in.Ranks[l.Rank]; f != nil && f.NowNS > 0 && ref > 0 && f.NowNS >= ref {
				w.Since = time.Duration(f.NowNS-ref) + time.Duration(p.AgeSeconds*float64(time.Second))
			}
			out[l.Rank] = w
		}
	}
	return out
}

// frOpName is the op of a profiling name ("gloo:all_reduce").
func frOpName(s string) string {
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// buildStories makes every rank's view from the model after its
// placements, the graph's edges and the Flight Recorder.
func buildStories(m Model, g Graph, in Input) map[int]*rankStory {
	waits := map[int][]int{}
	for _, e := range g.Edges {
		waits[e.From] = append(waits[e.From], e.To)
	}
	frw := frWaits(in)
	shared := sharedFrames(in)
	out := make(map[int]*rankStory, len(m.Ranks))
	for r, rk := range m.Ranks {
		s := &rankStory{Rank: r, Status: rk.Status, In: rk.In, FR: frw[r], WaitsFor: waits[r], Alive: true}
		sort.Ints(s.WaitsFor)
		if f := in.Ranks[r]; f != nil {
			s.Main, s.Alive, s.Ending, s.SharedLen = f.Main, f.Alive, f.Ending, shared
			if !f.Alive && f.EndedNS > 0 && f.NowNS >= f.EndedNS {
				s.EndedAgo = time.Duration(f.NowNS - f.EndedNS)
			}
			if !f.Alive && f.MainCapturedNS > 0 && f.NowNS >= f.MainCapturedNS {
				s.CapturedAgo = max(time.Duration(f.NowNS-f.MainCapturedNS), time.Nanosecond)
			}
		}
		if s.Status == Dead {
			s.FR = nil // its recorder died with it
		}
		out[r] = s
	}
	return out
}

// sameOp: the rings' op and the Flight Recorder's are one call (one
// group, one name), under two numberings.
func (s *rankStory) sameOp() bool {
	return s.In != nil && s.FR != nil && !s.In.fromStack() && s.In.Group == s.FR.Group && s.In.Name == s.FR.Name
}

// Wait says which collective the rank waits in, with whose numbering; ""
// when it waits in none the evidence shows.
func (s *rankStory) Wait() string {
	switch {
	case s.In == nil || s.Status != InCollective:
		if s.FR != nil {
			return s.FR.String() + " pending (issued where the rings do not see it, as DDP's from C++)"
		}
		return ""
	case s.sameOp():
		return fmt.Sprintf("%s on group %s (#%d by the %s, #%d by the %s)", jobtext.Token(s.In.Name, jobtext.Name),
			jobtext.Token(s.In.Group, jobtext.Name), s.FR.Seq, frSeq, s.In.Seq, ringsCount)
	case s.In.fromStack() && s.FR != nil:
		// The stack shows it waits; the recorder says in what.
		return s.FR.String()
	case s.FR != nil:
		return fmt.Sprintf("%s; the Flight Recorder also has %s pending", s.In, s.FR)
	}
	return s.In.String()
}

// Stack says where its main thread is: now (a live capture), or where it
// was as it ended (its last capture, with its age); "" when none.
func (s *rankStory) Stack() string {
	if s.Main == nil {
		return ""
	}
	w := frameWordsShared(s.Main, s.SharedLen)
	if s.Alive {
		return "main thread in " + w
	}
	if s.CapturedAgo > 0 {
		// Where the watcher saw it while it lived: the last place known,
		// said as such (it may have moved before it was killed).
		return fmt.Sprintf("main thread was in %s when the watcher captured it, %s before this read (it left no stack as it ended)", w, s.CapturedAgo.Round(time.Second))
	}
	if s.EndedAgo > 0 {
		return fmt.Sprintf("main thread was in %s as it ended, %s before this read", w, s.EndedAgo.Round(time.Second))
	}
	return "main thread was in " + w + " as it ended"
}

// Doing is its line under Ranks.
func (s *rankStory) Doing() string {
	switch {
	case s.Status == Dead:
		if s.Ending != "" {
			return "dead: " + s.Ending
		}
		return "dead"
	case s.Status == NoEvidence && s.FR == nil:
		return "no evidence (no live agent answered, no ring)"
	}
	w := s.Wait()
	if w == "" {
		out := "outside any collective"
		if st := s.Stack(); st != "" {
			out += ", " + st
		}
		return out
	}
	out := "in " + w
	switch {
	case len(s.WaitsFor) > 0:
		out += ", waiting for " + rankWords(s.WaitsFor)
	case s.Status == InCollective:
		out += ", every member entered it"
	}
	if s.Status != InCollective || s.In.fromStack() && s.FR != nil || !s.Alive {
		// Not placed by the rings: where its thread is says the rest.
		if st := s.Stack(); st != "" {
			out += "; " + st
		}
	}
	return out
}

// storyOf is rank r's view, nil before the stories are built (a moving
// job's verdict has none).
func (in Input) storyOf(r int) *rankStory {
	if in.stories == nil {
		return nil
	}
	return in.stories[r]
}

// mainWords is "its main thread is in X" for an evidence line, from the
// rank's view when there is one.
func mainWords(in Input, r int, t *stacks.Thread) string {
	if s := in.storyOf(r); s != nil && s.Main == t && s.Main != nil {
		if !s.Alive {
			return "its " + s.Stack()
		}
		return "its main thread is in " + frameWordsShared(t, s.SharedLen)
	}
	return "its main thread is in " + frameWords(t)
}

// twoNumberings says, once, why one call has two numbers, when the
// report shows both.
func twoNumberings(rep Report) string {
	var b strings.Builder
	for _, h := range rep.Hypotheses {
		for _, e := range h.Evidence {
			b.WriteString(e.Text)
		}
	}
	for _, g := range rep.Ranks {
		b.WriteString(g.Doing)
	}
	if text := b.String(); strings.Contains(text, ringsCount) && strings.Contains(text, frSeq) {
		return "two numberings: the Flight Recorder's seq counts every collective of a process group (DDP's from C++ too); the rings' count is the calls the agent saw this process make on the group"
	}
	return ""
}

// durWords is a duration as a person says it: "30 min", "29m48s".
func durWords(d time.Duration) string {
	if d >= time.Minute && d%time.Minute == 0 {
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return d.Round(time.Second).String()
}

// pendingRanks are the ranks the Flight Recorder shows in pg's op seq
// (enqueued, not completed), and the members that never enqueued it.
func pendingRanks(pg fr.PGReport, seq int64) (in, never []int) {
	for _, l := range pg.LaggingRanks {
		switch {
		case l.Pending != nil && l.Pending.Seq == seq:
			in = append(in, l.Rank)
		case l.LastEnqueued >= 0 && l.LastEnqueued < seq:
			never = append(never, l.Rank)
		}
	}
	sort.Ints(in)
	sort.Ints(never)
	return in, never
}
