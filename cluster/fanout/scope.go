package fanout

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// JobScope is the whole job as an evidence.Scope: the coordinator asks
// every node's daemon. Pids name processes of one node (list_processes
// lists the coordinator's own), so a selection by pid is Here's.
type JobScope struct {
	Job *Job
	// Here is the coordinator's own node; nil refuses pid selections.
	Here evidence.Scope
}

// Scope is the job as an evidence.Scope, with here for pid selections.
func (j *Job) Scope(here evidence.Scope) *JobScope { return &JobScope{Job: j, Here: here} }

// callError makes a whole-job failure (membership, a refused partial
// answer) the caller's to act on: its text says what is missing.
func callError(err error) error {
	if err == nil {
		return nil
	}
	return &evidence.CallError{Msg: err.Error()}
}

// here serves a pid selection on the coordinator's own node.
func (s *JobScope) here() (evidence.Scope, error) {
	if s.Here == nil {
		return nil, &evidence.CallError{Msg: "pids name one node's processes, and this whole-job server reads no node of its own: select ranks instead"}
	}
	return s.Here, nil
}

// Stacks captures the selected ranks' threads through their nodes.
func (s *JobScope) Stacks(ctx context.Context, sel evidence.Selection) (*evidence.StacksAnswer, error) {
	if len(sel.PIDs) > 0 {
		h, err := s.here()
		if err != nil {
			return nil, err
		}
		return h.Stacks(ctx, sel)
	}
	procs, cov, err := s.Job.Stacks(ctx, sel.Ranks)
	if err != nil {
		return nil, callError(err)
	}
	ans := &evidence.StacksAnswer{Processes: procs, Sources: map[string]string{}, Coverage: &cov}
	by := map[string][]int{}
	for _, p := range procs {
		src := jobtext.Clip(p.Source, jobtext.Name) // a node's word
		by[src] = append(by[src], p.Rank)
	}
	for src, rs := range by {
		ans.Sources[src] = "ranks " + rankset.Format(rs)
	}
	return ans, nil
}

// FlightRecorder snapshots the selected torch ranks through their nodes
// and decodes every node's dumps here, for one analysis.
func (s *JobScope) FlightRecorder(ctx context.Context, sel evidence.Selection, onlyActive bool) (*evidence.FRAnswer, error) {
	if len(sel.PIDs) > 0 {
		h, err := s.here()
		if err != nil {
			return nil, err
		}
		return h.FlightRecorder(ctx, sel, onlyActive)
	}
	dumps, cov, err := s.Job.FlightRecorder(ctx, sel.Ranks, onlyActive)
	if err != nil {
		return nil, callError(err)
	}
	loaded, problems := evidence.LoadFR(ctx, dumps)
	if dumps == nil {
		dumps = []evidence.FRDump{}
	}
	return &evidence.FRAnswer{Dumps: dumps, Loaded: loaded, Failed: append(cov.Problems, problems...), Coverage: &cov}, nil
}

// Evidence is every node's bundle merged; a partial one is refused in
// the strict mode.
func (s *JobScope) Evidence(ctx context.Context, commPerRank int) (*evidence.Bundle, *evidence.Coverage, error) {
	b, cov := s.Job.Evidence(ctx, commPerRank)
	if err := s.Job.strict(cov); err != nil {
		return nil, nil, callError(err)
	}
	return b, &cov, nil
}

// Pulse is every node's liveness and ring progress; a partial one is
// refused in the strict mode.
func (s *JobScope) Pulse(ctx context.Context) (*evidence.Bundle, *evidence.Coverage, error) {
	b, cov := s.Job.Pulse(ctx)
	if err := s.Job.strict(cov); err != nil {
		return nil, nil, callError(err)
	}
	return b, &cov, nil
}

// Samples are not taken across nodes: the node API has no sampling call,
// so the whole job's straggler is named from the rings and the Flight
// Recorder's arrival order alone.
func (s *JobScope) Samples(context.Context, int, time.Duration) map[int][]*stacks.Thread {
	return nil
}

// GPU is every node's GPU report.
func (s *JobScope) GPU(ctx context.Context) ([]gpu.Report, *evidence.Coverage, error) {
	reps, cov, err := s.Job.GPU(ctx)
	if err != nil {
		return nil, nil, callError(err)
	}
	return reps, &cov, nil
}

// Query is SQL over every node's ring tables. A statement that names no
// ring table but the history or the table docs is the coordinator's own:
// those are kept where it runs.
func (s *JobScope) Query(ctx context.Context, sql string, limit int) (*sqlengine.Result, error) {
	res, err := s.Job.Query(ctx, sql, limit)
	var qe *sqlengine.Error
	if s.Here != nil && errors.As(err, &qe) && qe.Kind == "no_table" && localOnly.MatchString(sql) {
		res, err = s.Here.Query(ctx, sql, limit)
		if err == nil {
			if res.DataQuality == nil {
				res.DataQuality = &sqlengine.Quality{}
			}
			res.DataQuality.Notes = append(res.DataQuality.Notes, "answered by the coordinator's own engine: the history and probing.* tables are kept where it runs, not on the nodes")
		}
	}
	return res, err
}

// localOnly finds the schemas only the coordinator's engine holds.
var localOnly = regexp.MustCompile(`(?i)\b(history|probing)\s*\.`)

// Peers is how many other nodes the job has, by membership.
func (s *JobScope) Peers(ctx context.Context) (int, error) {
	ns, _, err := s.Job.nodes(ctx)
	if err != nil {
		return 0, fmt.Errorf("membership: %w", err)
	}
	return max(len(ns)-1, 0), nil
}
