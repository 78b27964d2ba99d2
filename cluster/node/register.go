package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/procfacts"
)

// JobStore is one job's TCPStore and run id, as its ranks see them.
type JobStore struct {
	Store string // MASTER_ADDR:MASTER_PORT
	Run   string
}

// JobStores lists the stores of the jobs whose live ranks run on this
// node: each live agent of ours whose environment (its /proc environ,
// read only for trusted agents) names MASTER_ADDR and MASTER_PORT, with
// its run id (runID reads the same variables as membership.RunID). A node
// daemon serves one data dir for as long as it lives, and a later job on
// the node starts no second one (the data dir's lock): it must register
// in that job's store too, or the whole-job view goes blind to the node.
func (l *Local) JobStores(runID func(getenv func(string) string) string) ([]JobStore, []string) {
	as, err := agent.Discover(l.Agents)
	var problems []string
	if err != nil {
		problems = append(problems, "agents: "+err.Error())
	}
	seen := map[JobStore]bool{}
	var out []JobStore
	for _, a := range as {
		if !ours(a) || !a.Alive {
			continue
		}
		env, err := procfacts.Env(a.PID)
		if err != nil {
			continue // gone, or another user's: its job is not ours to register in
		}
		ma, mp := strings.TrimSpace(env["MASTER_ADDR"]), strings.TrimSpace(env["MASTER_PORT"])
		if ma == "" || mp == "" {
			continue
		}
		js := JobStore{Store: net.JoinHostPort(ma, mp), Run: runID(func(k string) string { return env[k] })}
		if !seen[js] {
			seen[js] = true
			out = append(out, js)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Store+out[i].Run < out[j].Store+out[j].Run })
	return out, problems
}

// Registrar keeps this node registered in the store of every job that
// runs on it: at start the daemon's own job, then each job whose ranks
// appear later (every Every), each once it succeeds, retried with a back
// off while its store does not answer (it comes up with the job's
// init_process_group, often after the daemon).
type Registrar struct {
	Self     cluster.Node
	Jobs     func() []JobStore
	Register func(ctx context.Context, store, run string, n cluster.Node) error
	Every    time.Duration
	Logger   *slog.Logger
}

type regState struct {
	done   bool
	next   time.Time
	wait   time.Duration
	warned int
}

// Run registers until ctx ends.
func (r *Registrar) Run(ctx context.Context) {
	every := r.Every
	if every <= 0 {
		every = 5 * time.Second
	}
	state := map[JobStore]*regState{}
	selfHost, _, _ := net.SplitHostPort(r.Self.Addr)
	for {
		now := time.Now()
		for _, js := range r.Jobs() {
			st := state[js]
			if st == nil {
				st = &regState{wait: time.Second}
				state[js] = st
				if h, _, err := net.SplitHostPort(js.Store); err == nil && cluster.LoopbackHost(selfHost) && !cluster.LoopbackHost(h) {
					// Every node's daemon would register the same
					// 127.0.0.1 address.
					st.done = true
					r.Logger.Warn("not registered in the job's TCPStore: this daemon serves loopback only (no PROBING_AUTH_TOKEN), which other hosts cannot reach; set the job's PROBING_AUTH_TOKEN so it binds a reachable address", "store", js.Store, "run", js.Run)
				}
			}
			if st.done || now.Before(st.next) {
				continue
			}
			err := r.Register(ctx, js.Store, js.Run, r.Self)
			if err == nil {
				st.done = true
				r.Logger.Info("registered in the job's TCPStore", "store", js.Store, "run", js.Run)
				continue
			}
			if st.warned == 0 || st.wait >= 30*time.Second {
				r.Logger.Warn("not registered in the job's TCPStore yet (retrying): until then the coordinator needs --peers to find this node", "store", js.Store, "run", js.Run, "err", err)
			}
			st.warned++
			st.next = now.Add(st.wait)
			st.wait = min(2*st.wait, 60*time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(every, nextDue(state, now))):
		}
	}
}

// nextDue is how long until the first retry that is due, at least 100 ms.
func nextDue(state map[JobStore]*regState, now time.Time) time.Duration {
	d := time.Hour
	for _, st := range state {
		if !st.done {
			d = min(d, st.next.Sub(now))
		}
	}
	return max(d, 100*time.Millisecond)
}

// String is for logs and tests.
func (js JobStore) String() string { return fmt.Sprintf("%s (run %s)", js.Store, js.Run) }
