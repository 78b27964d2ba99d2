package fanout

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fedsql"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/internal/envswitch"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// Options bound a fan-out.
type Options struct {
	// Concurrency: nodes asked at once (PROBING_FANOUT_CONCURRENCY, 64).
	Concurrency int
	// PeerTimeout: one node's time (PROBING_REMOTE_QUERY_TIMEOUT_SECS, 30 s).
	PeerTimeout time.Duration
	// Deadline: the whole fan-out (PROBING_STACK_FANOUT_DEADLINE_SEC, 10 s).
	Deadline time.Duration
	// Strict: a partial answer is an error (PROBING_FANOUT_STRICT=1).
	Strict bool
	// SQL holds cluster_query to the engine's per-query bounds, with the
	// engine's variables (PROBING_MCP_QUERY_MEMORY, _MAX_VALUE,
	// _CONCURRENCY); nil: fedsql's default.
	SQL *sqlengine.Limiter
}

// OptionsFromEnv reads the PROBING_* fan-out variables; a bad value is
// an error naming it.
func OptionsFromEnv(getenv func(string) string) (Options, error) {
	o := Options{Concurrency: 64, PeerTimeout: 30 * time.Second, Deadline: 10 * time.Second}
	num := func(name string, lo, hi float64) (float64, bool, error) {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return 0, false, nil
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < lo || f > hi {
			return 0, false, fmt.Errorf("%s=%q: want a number from %g to %g", name, v, lo, hi)
		}
		return f, true, nil
	}
	if f, ok, err := num(cluster.EnvConcurrency, 1, 4096); err != nil {
		return o, err
	} else if ok {
		o.Concurrency = int(f)
	}
	if f, ok, err := num(cluster.EnvPeerTimeout, 0.1, 3600); err != nil {
		return o, err
	} else if ok {
		o.PeerTimeout = time.Duration(f * float64(time.Second))
	}
	if f, ok, err := num(cluster.EnvDeadline, 0.1, 3600); err != nil {
		return o, err
	} else if ok {
		o.Deadline = time.Duration(f * float64(time.Second))
	}
	strict, err := envswitch.Parse(cluster.EnvStrict, getenv(cluster.EnvStrict))
	if err != nil {
		return o, err
	}
	o.Strict = strict
	var so sqlengine.Options
	if err := so.FromEnv(getenv); err != nil {
		return o, err
	}
	if o.SQL, err = fedsql.NewLimiter(so); err != nil {
		return o, err
	}
	return o, nil
}

// Members says who the nodes are now (membership), with what it could
// not read.
type Members func(ctx context.Context) ([]cluster.Node, []string, error)

// Job is the coordinator's view of every node.
type Job struct {
	Members Members
	Client  *Client
	Opt     Options

	mu   sync.Mutex
	last map[string]*node.Info // by address: each node's last answer
	seen map[string]time.Time
}

// NewJob builds a Job.
func NewJob(m Members, c *Client, opt Options) *Job {
	return &Job{Members: m, Client: c, Opt: opt, last: map[string]*node.Info{}, seen: map[string]time.Time{}}
}

type progressKey struct{}

// Progress is told how far a fan-out is.
type Progress func(done, total int, msg string)

// WithProgress has the fan-outs under ctx report to p.
func WithProgress(ctx context.Context, p Progress) context.Context {
	return context.WithValue(ctx, progressKey{}, p)
}

// ErrPartial is the strict mode's error for a partial answer.
type ErrPartial struct{ Coverage evidence.Coverage }

func (e *ErrPartial) Error() string {
	return "partial answer refused (" + cluster.EnvStrict + "=1): " + e.Coverage.Text()
}

// nodes resolves membership; it fills each node's ranks from its last
// answer when membership did not say them.
func (j *Job) nodes(ctx context.Context) ([]cluster.Node, []string, error) {
	ns, problems, err := j.Members(ctx)
	if err != nil {
		return nil, problems, err
	}
	if len(ns) == 0 {
		return nil, problems, fmt.Errorf("membership found no node daemon (%s)", strings.Join(append(problems, "no source listed one"), "; "))
	}
	// A node listed twice is asked once.
	seen := map[string]bool{}
	uniq := ns[:0]
	for _, n := range ns {
		if seen[n.Addr] {
			problems = append(problems, fmt.Sprintf("%s is listed twice: asked once", evidence.NodeWords(n)))
			continue
		}
		seen[n.Addr] = true
		uniq = append(uniq, n)
	}
	ns = uniq
	j.mu.Lock()
	for i := range ns {
		if in := j.last[ns[i].Addr]; in != nil && ns[i].Ranks == "" {
			ns[i].Ranks = in.Node.Ranks
		}
		if t := j.seen[ns[i].Addr]; t.After(ns[i].LastSeen) {
			ns[i].LastSeen = t
		}
	}
	j.mu.Unlock()
	return ns, problems, nil
}

// each calls fn on every node, Concurrency at a time, each within the
// peer timeout and all within the deadline. fn's evidence.PeerError (or any error)
// makes the node missing.
func (j *Job) each(ctx context.Context, ns []cluster.Node, fn func(ctx context.Context, n cluster.Node) error) evidence.Coverage {
	ctx, cancel := context.WithTimeout(ctx, j.Opt.Deadline)
	defer cancel()
	progress, _ := ctx.Value(progressKey{}).(Progress)
	cov := evidence.Coverage{Asked: len(ns)}
	var mu sync.Mutex
	sem := make(chan struct{}, max(j.Opt.Concurrency, 1))
	var wg sync.WaitGroup
	done := 0
	for _, n := range ns {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			mu.Lock()
			cov.Missing = append(cov.Missing, evidence.Outcome{Node: n, Err: &evidence.PeerError{Addr: n.Addr, Kind: KindTimeout, Msg: "not asked: the fan-out's deadline passed first"}})
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			pctx, pcancel := context.WithTimeout(ctx, j.Opt.PeerTimeout)
			t0 := time.Now()
			err := fn(pctx, n)
			pcancel()
			mu.Lock()
			defer mu.Unlock()
			done++
			if err != nil {
				pe, ok := err.(*evidence.PeerError)
				if !ok {
					pe = &evidence.PeerError{Addr: n.Addr, Kind: KindGarbage, Msg: err.Error()}
				}
				cov.Missing = append(cov.Missing, evidence.Outcome{Node: n, Err: pe, Took: time.Since(t0)})
			} else {
				cov.Answered++
				j.mu.Lock()
				j.seen[n.Addr] = time.Now()
				j.mu.Unlock()
			}
			if progress != nil {
				progress(done, len(ns), fmt.Sprintf("%d/%d nodes", done, len(ns)))
			}
		}()
	}
	wg.Wait()
	sort.Slice(cov.Missing, func(a, b int) bool { return cov.Missing[a].Node.Addr < cov.Missing[b].Node.Addr })
	return cov
}

// claims checks the ranks a node says it holds against what membership
// registered for it: a node may not speak for another's ranks.
func claims(n cluster.Node, ranks []int) (ok []int, lies []int) {
	if n.Ranks == "" || n.Source == "peers" || n.Source == "disk-peers" {
		return ranks, nil
	}
	reg, err := rankset.Parse(n.Ranks)
	if err != nil {
		return ranks, nil
	}
	in := map[int]bool{}
	for _, r := range reg {
		in[r] = true
	}
	for _, r := range ranks {
		if in[r] {
			ok = append(ok, r)
		} else {
			lies = append(lies, r)
		}
	}
	return ok, lies
}

// NodeStatus is one node as list_cluster_nodes shows it.
type NodeStatus struct {
	cluster.Node
	Status string `json:"status"` // ok, or the failure kind
	Why    string `json:"why,omitempty"`
	// Live and Dead are its ranks by their processes' state.
	Live    string `json:"live_ranks,omitempty"`
	Dead    string `json:"dead_ranks,omitempty"`
	Version string `json:"version,omitempty"`
	// ClockOffset is its clock minus ours (ms), said when over 1 s.
	ClockOffsetMS int64 `json:"clock_offset_ms,omitempty"`
}

// Nodes asks every node for its ranks.
func (j *Job) Nodes(ctx context.Context) ([]NodeStatus, evidence.Coverage, error) {
	ns, problems, err := j.nodes(ctx)
	if err != nil {
		return nil, evidence.Coverage{Problems: problems}, err
	}
	out := make([]NodeStatus, len(ns))
	idx := map[string]int{}
	for i, n := range ns {
		out[i] = NodeStatus{Node: n}
		idx[n.Addr] = i
	}
	var mu sync.Mutex
	cov := j.each(ctx, ns, func(ctx context.Context, n cluster.Node) error {
		var in node.Info
		t0 := time.Now()
		if err := j.Client.Do(ctx, n, http.MethodGet, node.PathInfo, nil, &in); err != nil {
			return err
		}
		t1 := time.Now()
		var live, dead []int
		for _, r := range in.Ranks {
			if r.Alive {
				live = append(live, r.Rank)
			} else {
				dead = append(dead, r.Rank)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		s := &out[idx[n.Addr]]
		s.Status, s.Version = "ok", in.Version
		s.Live, s.Dead = rankset.Format(live), rankset.Format(dead)
		if s.Ranks == "" {
			s.Ranks = rankset.Format(append(append([]int{}, live...), dead...))
		}
		s.LastSeen = t1
		mid := t0.Add(t1.Sub(t0) / 2).UnixNano()
		if off := (in.NowNS - mid) / 1e6; off > 1000 || off < -1000 {
			s.ClockOffsetMS = off
		}
		j.mu.Lock()
		in.Node.Ranks = s.Ranks
		j.last[n.Addr] = &in
		j.mu.Unlock()
		return nil
	})
	for _, m := range cov.Missing {
		s := &out[idx[m.Node.Addr]]
		s.Status, s.Why = m.Err.Kind, m.Err.Msg
	}
	cov.Problems = append(problems, cov.Problems...)
	return out, cov, nil
}

// strict turns a partial coverage into an error when asked to.
func (j *Job) strict(cov evidence.Coverage) error {
	if j.Opt.Strict && !cov.Complete() {
		return &ErrPartial{Coverage: cov}
	}
	return nil
}

// StrictError is the strict mode's error for a coverage, nil otherwise.
func (j *Job) StrictError(cov evidence.Coverage) error { return j.strict(cov) }
