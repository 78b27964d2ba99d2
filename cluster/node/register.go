package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
)

// JobStore is one job's TCPStore and run id, as its ranks see them, and
// the name and node rank its ranks give this node.
type JobStore struct {
	Store string // MASTER_ADDR:MASTER_PORT
	Run   string
	// Host is this node's name for the job: its ranks' PROBING_NODE_HOST,
	// else the hostname (cluster.HostName's rule, read from their
	// environment); "" registers the daemon's own name (Registrar.Self).
	Host string
	// NodeRank is the job's index of this node: its ranks' GROUP_RANK,
	// else SLURM_NODEID (membership.SelfNode's rule), -1 when unset. Used
	// only with Host.
	NodeRank int
}

// key is the job: one registration each, whatever name it gives the node.
func (js JobStore) key() [2]string { return [2]string{js.Store, js.Run} }

// JobStores lists the stores of the jobs whose live ranks run on this
// node: each live agent of ours whose environment (its /proc environ,
// read only for trusted agents) names MASTER_ADDR and MASTER_PORT, with
// its run id (runID reads the same variables as membership.RunID) and the
// node name and rank the job's ranks set (the name the job's own daemon
// would have registered: the daemon that runs may have been started by
// an earlier job, under that job's PROBING_NODE_HOST and GROUP_RANK). A
// node daemon serves one data dir for as long as it lives, and a later
// job on the node starts no second one (the data dir's lock): it must
// register in that job's store too, or the whole-job view goes blind to
// the node. A job is listed once, named by its lowest rank here; ranks
// that disagree, or a name or node rank that is not one, are problems.
func (l *Local) JobStores(runID func(getenv func(string) string) string) ([]JobStore, []string) {
	as, err := agent.Discover(l.Agents)
	var problems []string
	if err != nil {
		problems = append(problems, "agents: "+err.Error())
	}
	type found struct {
		js   JobStore
		rank int
	}
	byJob := map[[2]string]*found{}
	for _, a := range as {
		if !a.IsJobRank() || !a.Alive {
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
		getenv := func(k string) string { return env[k] }
		js := JobStore{Store: net.JoinHostPort(ma, mp), Run: runID(getenv)}
		js.Host, js.NodeRank, problems = jobNode(getenv, fmt.Sprintf("rank %d (pid %d)", a.Rank(), a.PID), problems)
		f := byJob[js.key()]
		switch {
		case f == nil:
			byJob[js.key()] = &found{js, a.Rank()}
		case f.js != js:
			problems = append(problems, fmt.Sprintf("the ranks of job %s on this node name it differently (rank %d: %s node rank %d; rank %d: %s node rank %d): the lowest rank's is used",
				js, f.rank, f.js.Host, f.js.NodeRank, a.Rank(), js.Host, js.NodeRank))
			if a.Rank() < f.rank {
				*f = found{js, a.Rank()}
			}
		case a.Rank() < f.rank:
			f.rank = a.Rank()
		}
	}
	out := make([]JobStore, 0, len(byJob))
	for _, f := range byJob {
		out = append(out, f.js)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Store+out[i].Run < out[j].Store+out[j].Run })
	return out, problems
}

// jobNode is this node's name and node rank as a process's environment
// gives them (cluster.NodeNameFromEnv, else the hostname;
// cluster.NodeRankFromEnv); what cannot be read is said in problems, of
// the process who.
func jobNode(getenv func(string) string, who string, problems []string) (string, int, []string) {
	host, err := cluster.NodeNameFromEnv(getenv)
	if err != nil {
		problems = append(problems, fmt.Sprintf("%s: %v; the hostname is used", who, err))
	}
	if host == "" {
		host, _ = os.Hostname()
	}
	nr, err := cluster.NodeRankFromEnv(getenv)
	if err != nil {
		problems = append(problems, fmt.Sprintf("%s: %v; its node rank is unknown", who, err))
	}
	return host, nr, problems
}

// Registrar keeps this node registered in the store of every job that
// runs on it: at start the daemon's own job, then each job whose ranks
// appear later (every Every), each once it succeeds, retried with a back
// off while its store does not answer (it comes up with the job's
// init_process_group, often after the daemon). Each job gets Self under
// the name and node rank the job gives the node (JobStore.Host and
// NodeRank; Self's own when Host is ""). A job (store and run) is
// registered once: the first name Jobs gives it counts.
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
	state := map[[2]string]*regState{}
	selfHost, _, _ := net.SplitHostPort(r.Self.Addr)
	for {
		now := time.Now()
		for _, js := range r.Jobs() {
			st := state[js.key()]
			if st == nil {
				st = &regState{wait: time.Second}
				state[js.key()] = st
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
			n := r.Self
			if js.Host != "" {
				n.Host, n.NodeRank = js.Host, js.NodeRank
			}
			err := r.Register(ctx, js.Store, js.Run, n)
			if err == nil {
				st.done = true
				r.Logger.Info("registered in the job's TCPStore", "store", js.Store, "run", js.Run, "host", n.Host, "node_rank", n.NodeRank)
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
func nextDue(state map[[2]string]*regState, now time.Time) time.Duration {
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
