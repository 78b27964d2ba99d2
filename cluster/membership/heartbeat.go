package membership

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// Bounds of the heartbeat registry.
const (
	MaxHeartbeatBody = 1 << 20
	maxMembers       = 1 << 17 // processes (ranks), not nodes
	maxTombstones    = 4096
	// maxBeatMembers bounds one report: a node's processes, or a relay's
	// subtree (issue 23: 20,000 members in one heartbeat made 16,384 fake
	// nodes).
	maxBeatMembers = 4096
)

// StaleAfter is PROBING_CLUSTER_STALE_SEC (default 25 s, Probing's): a
// member silent that long is stale; twice that, removed.
func StaleAfter(getenv func(string) string) (time.Duration, error) {
	v := strings.TrimSpace(getenv(cluster.EnvStaleSec))
	if v == "" {
		return 25 * time.Second, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 1 || f > 86400 {
		return 0, fmt.Errorf("%s=%q: want seconds, 1..86400", cluster.EnvStaleSec, clip(v))
	}
	return time.Duration(f * float64(time.Second)), nil
}

// probingMember is what Probing's heartbeat carries per process (its
// probing_proto Node: host, addr, ranks, role, status, timestamp); only
// the fields membership reads are named, the whole object is echoed back.
type probingMember struct {
	Host      string `json:"host"`
	Addr      string `json:"addr"`
	Rank      *int   `json:"rank"`
	GroupRank *int   `json:"group_rank"`
}

type member struct {
	raw      json.RawMessage
	m        probingMember
	seen     time.Time
	version  uint64
	memberID string
}

type tombstone struct {
	id      string
	version uint64
}

// Registry receives Probing's hierarchical heartbeats (PUT /apis/nodes)
// and keeps who reported lately. The clock is injectable for tests.
type Registry struct {
	stale time.Duration
	now   func() time.Time

	mu      sync.Mutex
	version uint64
	members map[string]*member
	byRank  map[int]string // rank → member key: a rank lives at one endpoint
	tombs   []tombstone
	floor   uint64 // deltas from before this version are not answerable
	// refused are the recent claims of a rank another live member holds
	// (at most maxRefused, newest last), said by Nodes.
	refused []string
}

// maxRefused bounds the refused claims remembered.
const maxRefused = 16

// NewRegistry makes a registry; now nil means time.Now.
func NewRegistry(stale time.Duration, now func() time.Time) *Registry {
	if stale <= 0 {
		stale = 25 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	return &Registry{stale: stale, now: now, members: map[string]*member{}, byRank: map[int]string{}}
}

// memberKey is Probing's: "host:addr" (its removed list names these).
func memberKey(m probingMember) string { return m.Host + ":" + m.Addr }

// drop removes a member and remembers it for the next deltas.
func (r *Registry) drop(id string) {
	m, ok := r.members[id]
	if !ok {
		return
	}
	delete(r.members, id)
	if m.m.Rank != nil && r.byRank[*m.m.Rank] == id {
		delete(r.byRank, *m.m.Rank)
	}
	r.version++
	r.tombs = append(r.tombs, tombstone{id, r.version})
}

// expire removes members silent for twice the stale time.
func (r *Registry) expire(now time.Time) {
	for id, m := range r.members {
		if now.Sub(m.seen) >= 2*r.stale {
			r.drop(id)
		}
	}
	if over := len(r.tombs) - maxTombstones; over > 0 {
		r.floor = r.tombs[over-1].version
		r.tombs = append([]tombstone(nil), r.tombs[over:]...)
	}
}

type putRequest struct {
	Nodes       []json.RawMessage `json:"nodes"`
	SeenVersion uint64            `json:"seen_version"`
}

type putReply struct {
	OK      bool              `json:"ok"`
	Version uint64            `json:"version"`
	Nodes   []json.RawMessage `json:"nodes"`
	Removed []string          `json:"removed"`
	// Refused: this report's members whose rank another live member holds.
	Refused []string `json:"refused,omitempty"`
}

// Tokenless refuses every heartbeat: without PROBING_AUTH_TOKEN a server
// listens on loopback only, and every local user can reach loopback, so a
// heartbeat there proves nothing (issue 23: one dropped the real node's
// ranks until the server restarted).
func Tokenless() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		http.Error(w, "heartbeats need PROBING_AUTH_TOKEN, loopback included (every local user can reach a loopback port): run the server and the job's agents with the same token", http.StatusUnauthorized)
	})
}

// Handler serves PUT /apis/nodes (a report, answered with what changed
// since seen_version) and GET /apis/nodes (every member).
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.Method {
		case http.MethodGet:
			// Probing's paginated list: {version, total, offset, nodes}.
			offset, _ := strconv.Atoi(req.URL.Query().Get("offset"))
			limit, err := strconv.Atoi(req.URL.Query().Get("limit"))
			if err != nil || limit <= 0 || limit > 4096 {
				limit = 4096
			}
			r.mu.Lock()
			r.expire(r.now())
			all := r.sorted(0)
			version := r.version
			r.mu.Unlock()
			offset = max(0, min(offset, len(all)))
			page := all[offset:min(len(all), offset+limit)]
			writeJSON(w, http.StatusOK, map[string]any{"version": version, "total": len(all), "offset": offset, "nodes": page})
			return
		case http.MethodPut, http.MethodPost:
		default:
			w.Header().Set("Allow", "GET, PUT")
			http.Error(w, "PUT a heartbeat {nodes, seen_version} or GET the members", http.StatusMethodNotAllowed)
			return
		}
		var in putRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, MaxHeartbeatBody))
		if err := dec.Decode(&in); err != nil {
			http.Error(w, "heartbeat body: not {nodes: [...], seen_version} JSON within 1 MiB: "+err.Error(), http.StatusBadRequest)
			return
		}
		if len(in.Nodes) > maxBeatMembers {
			http.Error(w, fmt.Sprintf("heartbeat: %d members in one report, over the %d one report may carry: refused", len(in.Nodes), maxBeatMembers), http.StatusRequestEntityTooLarge)
			return
		}
		members := make([]member, 0, len(in.Nodes))
		for i, raw := range in.Nodes {
			var m probingMember
			if err := json.Unmarshal(raw, &m); err != nil {
				http.Error(w, fmt.Sprintf("heartbeat node %d: %v", i, err), http.StatusBadRequest)
				return
			}
			if _, err := checkHostPort(m.Addr); err != nil {
				http.Error(w, fmt.Sprintf("heartbeat node %d: address %q: %v", i, clip(m.Addr), err), http.StatusBadRequest)
				return
			}
			if err := cluster.CheckNodeName(m.Host); m.Host != "" && err != nil {
				http.Error(w, fmt.Sprintf("heartbeat node %d: host %q: %v", i, clip(m.Host), err), http.StatusBadRequest)
				return
			}
			members = append(members, member{raw: raw, m: m, memberID: memberKey(m)})
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		now := r.now()
		r.expire(now)
		fresh := 0
		for _, nm := range members {
			if _, ok := r.members[nm.memberID]; !ok {
				fresh++
			}
		}
		if len(r.members)+fresh > maxMembers {
			http.Error(w, fmt.Sprintf("more than %d members: refused", maxMembers), http.StatusServiceUnavailable)
			return
		}
		var refused []string
		for _, nm := range members {
			// A rank is claimed, not grabbed: while the member that holds it
			// reports, another endpoint's claim is refused and said (a
			// heartbeat anyone on the network can send would otherwise drop
			// the real node's ranks). A holder gone stale yields it: a
			// restarted process on a new port.
			if nm.m.Rank != nil {
				if prev, ok := r.byRank[*nm.m.Rank]; ok && prev != nm.memberID {
					if h := r.members[prev]; h != nil && now.Sub(h.seen) < r.stale {
						why := fmt.Sprintf("rank %d claimed by %s, which rank %s holds and reported %s ago: refused", *nm.m.Rank, jobtext.Quote(nm.memberID, jobtext.Name), jobtext.Quote(prev, jobtext.Name), now.Sub(h.seen).Round(time.Second))
						refused = append(refused, nm.memberID)
						r.refused = append(r.refused, why)
						if len(r.refused) > maxRefused {
							r.refused = append([]string(nil), r.refused[len(r.refused)-maxRefused:]...)
						}
						continue
					}
				}
			}
			old, ok := r.members[nm.memberID]
			if !ok || string(old.raw) != string(nm.raw) {
				r.version++
				nm.version = r.version
			} else {
				nm.version = old.version
			}
			nm.seen = now
			m := nm
			r.members[nm.memberID] = &m
			// A rank that moved to another endpoint leaves the old one.
			if m.m.Rank != nil {
				if prev, ok := r.byRank[*m.m.Rank]; ok && prev != m.memberID {
					r.drop(prev)
				}
				r.byRank[*m.m.Rank] = m.memberID
			}
		}
		rep := putReply{OK: true, Version: r.version, Nodes: []json.RawMessage{}, Removed: []string{}, Refused: refused}
		since := in.SeenVersion
		if since < r.floor || since > r.version {
			since = 0 // too old (or from another registry's life): all of it
		}
		for _, m := range r.sorted(since) {
			rep.Nodes = append(rep.Nodes, m)
		}
		for _, t := range r.tombs {
			if t.version > since {
				if _, back := r.members[t.id]; !back {
					rep.Removed = append(rep.Removed, t.id)
				}
			}
		}
		writeJSON(w, http.StatusOK, rep)
	})
}

// sorted is every member changed after since, by rank then address.
func (r *Registry) sorted(since uint64) []json.RawMessage {
	ms := make([]*member, 0, len(r.members))
	for _, m := range r.members {
		if m.version > since {
			ms = append(ms, m)
		}
	}
	sortMembers(ms)
	out := make([]json.RawMessage, len(ms))
	for i, m := range ms {
		out[i] = m.raw
	}
	return out
}

func sortMembers(ms []*member) {
	rank := func(m *member) int {
		if m.m.Rank == nil {
			return 1 << 30
		}
		return *m.m.Rank
	}
	sort.Slice(ms, func(a, b int) bool {
		if ra, rb := rank(ms[a]), rank(ms[b]); ra != rb {
			return ra < rb
		}
		return ms[a].m.Addr < ms[b].m.Addr
	})
}

// Nodes lists the nodes heard from: one per address (Kind probing,
// Source heartbeat, LastSeen the latest report, Ranks the ranks heard at
// it), and a problem line for each stale one.
func (r *Registry) Nodes() ([]cluster.Node, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.expire(now)
	ms := make([]*member, 0, len(r.members))
	for _, m := range r.members {
		ms = append(ms, m)
	}
	sortMembers(ms)
	var (
		out   []cluster.Node
		ranks = map[string][]int{}
		at    = map[string]int{}
	)
	for _, m := range ms {
		i, ok := at[m.m.Addr]
		if !ok {
			host := m.m.Host
			if host == "" {
				host, _ = checkHostPort(m.m.Addr)
			}
			n := cluster.Node{Host: host, Addr: m.m.Addr, NodeRank: -1, Kind: cluster.KindProbing, Source: "heartbeat"}
			if m.m.GroupRank != nil && *m.m.GroupRank >= 0 {
				n.NodeRank = *m.m.GroupRank
			}
			i = len(out)
			at[m.m.Addr] = i
			out = append(out, n)
		}
		if m.seen.After(out[i].LastSeen) {
			out[i].LastSeen = m.seen
		}
		if m.m.Rank != nil && *m.m.Rank >= 0 {
			ranks[m.m.Addr] = append(ranks[m.m.Addr], *m.m.Rank)
		}
	}
	var problems []string
	for i := range out {
		if rs := ranks[out[i].Addr]; len(rs) > 0 {
			iv := make([][2]int, len(rs))
			for j, x := range rs {
				iv[j] = [2]int{x, x}
			}
			out[i].Ranks = formatIvals(iv)
		}
		if d := now.Sub(out[i].LastSeen); d >= r.stale {
			problems = append(problems, fmt.Sprintf("%s silent for %s (stale after %s, removed after %s)", label(out[i]), d.Round(time.Second), r.stale, 2*r.stale))
		}
	}
	for _, why := range r.refused {
		problems = append(problems, "heartbeat: "+why)
	}
	return out, problems
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
