package evidence

import (
	"context"
	"fmt"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// Scope is the evidence of one scope: this node (Node) or the whole job
// (the coordinator, fanout.JobScope). Every tool, the skill backend and
// the diagnosis read through one, so none of them branches on which it
// is, and a skill's SQL, stacks and verdict always see the same ranks.
type Scope interface {
	// Stacks captures the selected processes' threads.
	Stacks(ctx context.Context, sel Selection) (*StacksAnswer, error)
	// FlightRecorder snapshots the selected torch ranks.
	FlightRecorder(ctx context.Context, sel Selection, onlyActive bool) (*FRAnswer, error)
	// Evidence is the bundle of the diagnosis, every node's merged in the
	// whole job, its Flight Recorder analysed; an error only where the
	// scope refuses a partial answer (PROBING_FANOUT_STRICT).
	Evidence(ctx context.Context, commPerRank int) (*Bundle, *Coverage, error)
	// Pulse is the bundle of Options.Pulse: liveness and the rings'
	// progress only, nothing asked of a rank (the watcher's tick).
	Pulse(ctx context.Context) (*Bundle, *Coverage, error)
	// Samples are n rounds of each live rank's main stack, gap apart, for
	// a straggler no ring shows; nil where the scope cannot take them.
	Samples(ctx context.Context, n int, gap time.Duration) map[int][]*stacks.Thread
	// GPU is each node's GPU report.
	GPU(ctx context.Context) ([]gpu.Report, *Coverage, error)
	// Query runs one read-only statement over the scope's ring tables.
	Query(ctx context.Context, sql string, limit int) (*sqlengine.Result, error)
	// Peers is how many other nodes the scope holds (0 for a node).
	Peers(ctx context.Context) (int, error)
}

// Selection picks processes: pids (this node's, as list_processes lists
// them) and ranks as ranges; empty is every live rank.
type Selection struct {
	PIDs  []int
	Ranks string
}

// StacksAnswer is the selected processes' threads.
type StacksAnswer struct {
	Processes []stacks.Process
	// Sources says how each process's stacks were obtained: by pid on a
	// node, by source with its ranks in the whole job (thousands of
	// processes: ranges, not one entry per pid).
	Sources map[string]string
	// Coverage says which nodes answered (the whole job only).
	Coverage *Coverage
}

// FRAnswer is the selected ranks' Flight Recorder dumps, raw (with what
// the snapshot said of itself) and decoded for the analysis.
type FRAnswer struct {
	Dumps  []FRDump
	Loaded *fr.Loaded
	// Failed says which processes gave no dump, and why.
	Failed   []string
	Coverage *Coverage
}

// CallError is a selection the scope cannot serve; its text says how to
// change the call.
type CallError struct{ Msg string }

func (e *CallError) Error() string { return e.Msg }

// PeerError is why one node gave no answer.
type PeerError struct {
	// Kind is how it failed: unreachable, timeout, auth, garbage,
	// refused, not_daemon (the fan-out client's classes).
	Addr, Kind, Msg string
}

func (e *PeerError) Error() string { return e.Msg }

// Outcome is one node's part in a fan-out.
type Outcome struct {
	Node cluster.Node
	Err  *PeerError
	Took time.Duration
}

// Coverage says who answered a whole-job request and who did not, and
// why; a node's own answer has none.
type Coverage struct {
	Asked, Answered int
	Missing         []Outcome
	// Problems are membership's and the nodes' own partial answers.
	Problems []string
}

// Complete is whether every node asked answered.
func (c Coverage) Complete() bool { return c.Answered == c.Asked && c.Asked > 0 }

// Text is one line: "3/4 nodes answered; node-d (10.0.0.4:9781) timed
// out: no answer in time (ranks 12-15)".
func (c Coverage) Text() string {
	s := fmt.Sprintf("%d/%d node(s) answered", c.Answered, c.Asked)
	for i, m := range c.Missing {
		if i == 8 {
			s += fmt.Sprintf("; and %d more", len(c.Missing)-i)
			break
		}
		s += "; " + m.Words()
	}
	return s
}

// Words say who did not answer and why.
func (o Outcome) Words() string {
	s := fmt.Sprintf("%s %s: %s", NodeWords(o.Node), AddrWords(o.Err.Kind), o.Err.Msg)
	if o.Node.Ranks != "" {
		s += " (ranks " + RanksWords(o.Node.Ranks) + ")"
	}
	return s
}

// NodeWords names a node: its host quoted (membership's word), its
// address.
func NodeWords(n cluster.Node) string {
	return jobtext.Quote(n.Host, jobtext.Name) + " (" + AddrWords(n.Addr) + ")"
}

// AddrWords is an address as is when it is one, else quoted.
func AddrWords(a string) string { return jobtext.Token(a, jobtext.Name) }

// RanksWords is a rank set membership was told: as is when it is one,
// else quoted (the store's text).
func RanksWords(s string) string {
	if _, err := rankset.Parse(s); err != nil {
		return jobtext.Quote(s, jobtext.Name)
	}
	return s
}
