package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/tcpstore"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// RunID names the job's run as Probing does: the first set of
// TORCHELASTIC_RUN_ID, RDZV_ID, MASTER_PORT, else "run" (Probing's own
// fallback, so both find the same keys).
func RunID(getenv func(string) string) string {
	for _, k := range []string{"TORCHELASTIC_RUN_ID", "RDZV_ID", "MASTER_PORT"} {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
	}
	return "run"
}

// Our keys: a counter hands out slots, one JSON node per slot. A slot is
// never overwritten by another node, so a re-registering node gets a new
// slot and the reader keeps the later one.
func countKey(runID string) string { return "probing-mcp/" + runID + "/nodes" }
func slotKey(runID string, slot int64) string {
	return "probing-mcp/" + runID + "/node/" + strconv.FormatInt(slot, 10)
}

// The run index: each registration also appends its run id, so that a
// reader who does not know the run id (serve --job HOST:PORT from a login
// node, where the job's variables are not set) finds the ones present.
const runsKey = "probing-mcp/runs"

func runSlotKey(i int64) string { return runsKey + "/" + strconv.FormatInt(i, 10) }

// maxRunsRead bounds the index read: the newest registrations.
const maxRunsRead = 64

// RunIDSet reports whether the environment names the run (one of the
// variables RunID reads is set); otherwise RunID's "run" is a guess.
func RunIDSet(getenv func(string) string) bool {
	for _, k := range []string{"TORCHELASTIC_RUN_ID", "RDZV_ID", "MASTER_PORT"} {
		if strings.TrimSpace(getenv(k)) != "" {
			return true
		}
	}
	return false
}

// Probing's torchrun keys (its git main, the server's torchrun cluster
// module): global rank 0 writes master, each node's local rank 0 writes
// node/<group_rank>/local0, both {addr, http_base, bound}, local0 with
// node_rank. Read here through torch's "/" key prefix, as torch's own
// clients (and Probing's Python side) see them.
func probingMasterKey(runID string) string { return "probing/torchrun/" + runID + "/master" }
func probingLocal0Key(runID string, g int) string {
	return "probing/torchrun/" + runID + "/node/" + strconv.Itoa(g) + "/local0"
}

// probingInfo is the JSON Probing writes under both keys.
type probingInfo struct {
	Addr     string `json:"addr"`
	HTTPBase string `json:"http_base"`
	Bound    string `json:"bound"`
	NodeRank *int   `json:"node_rank"`
}

func checkRunID(runID string) error {
	if runID == "" || len(runID) > 256 || strings.ContainsFunc(runID, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("run id %q is empty, over 256 bytes or has control characters; set TORCHELASTIC_RUN_ID or RDZV_ID to the job's run id", clip(runID))
	}
	return nil
}

// dial connects and arranges that ctx (bounded by timeout) closes the
// connection, so the whole exchange, not only each call, is bounded.
func dial(ctx context.Context, storeAddr string, timeout time.Duration) (*tcpstore.Client, context.Context, func(), error) {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if _, err := checkHostPort(storeAddr); err != nil {
		return nil, nil, nil, fmt.Errorf("TCPStore address %q: %v; give MASTER_ADDR:MASTER_PORT", storeAddr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	c, err := tcpstore.Dial(ctx, storeAddr, timeout)
	if err != nil {
		cancel()
		return nil, nil, nil, fmt.Errorf("%w (is the job running, and is %s its MASTER_ADDR:MASTER_PORT?)", err, storeAddr)
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	return c, ctx, func() { stop(); c.Close(); cancel() }, nil
}

// storeErr says what failed, and that the deadline did it when it did.
func storeErr(ctx context.Context, storeAddr, doing string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("TCPStore %s: %s: no answer in time (%v); the store may be overloaded or not a TCPStore", storeAddr, doing, ctx.Err())
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("TCPStore %s: %s: no answer in time; the store may be overloaded or not a TCPStore", storeAddr, doing)
	}
	return fmt.Errorf("TCPStore %s: %s: %w", storeAddr, doing, err)
}

// Register writes n under a fresh slot of runID's keys. Only the Node's
// fields are written: never a token.
func Register(ctx context.Context, storeAddr, runID string, n cluster.Node, timeout time.Duration) error {
	if err := checkRunID(runID); err != nil {
		return err
	}
	if _, err := checkHostPort(n.Addr); err != nil {
		return fmt.Errorf("register: node address %q: %v; set %s to host:port", n.Addr, err, cluster.EnvAdvertiseAddr)
	}
	if n.LastSeen.IsZero() {
		n.LastSeen = time.Now().UTC()
	}
	body, err := json.Marshal(n)
	if err != nil {
		return err
	}
	c, ctx, done, err := dial(ctx, storeAddr, timeout)
	if err != nil {
		return err
	}
	defer done()
	slot, err := c.Add(countKey(runID), 1)
	if err != nil {
		return storeErr(ctx, storeAddr, "taking a slot", err)
	}
	if slot < 1 {
		return fmt.Errorf("TCPStore %s: the counter %s answered %d, not a slot; the key is not ours", storeAddr, countKey(runID), slot)
	}
	if err := c.Set(slotKey(runID, slot-1), body); err != nil {
		return storeErr(ctx, storeAddr, "writing this node", err)
	}
	// SET has no reply: a CHECK confirms the store took it.
	if ok, err := c.Check(slotKey(runID, slot-1)); err != nil || !ok {
		if err == nil {
			err = errors.New("the key is not there after SET")
		}
		return storeErr(ctx, storeAddr, "confirming the registration", err)
	}
	run, err := c.Add(runsKey, 1)
	if err != nil {
		return storeErr(ctx, storeAddr, "adding the run to the index", err)
	}
	if run >= 1 {
		if err := c.Set(runSlotKey(run-1), []byte(runID)); err != nil {
			return storeErr(ctx, storeAddr, "adding the run to the index", err)
		}
	}
	return nil
}

// RunsInStore lists the run ids our daemons registered under in the
// store, the newest first, each once (from the last maxRunsRead
// registrations). A garbled entry is a problem, not an error.
func RunsInStore(ctx context.Context, storeAddr string, timeout time.Duration) ([]string, []string, error) {
	c, ctx, done, err := dial(ctx, storeAddr, timeout)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	raw, err := c.Get(runsKey)
	if errors.Is(err, tcpstore.ErrNoKey) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, storeErr(ctx, storeAddr, "reading "+runsKey, err)
	}
	count, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil || count < 0 {
		return nil, []string{fmt.Sprintf("%s holds %s, not a count; the run index was not read", runsKey, jobtext.Quote(string(raw), jobtext.Name))}, nil
	}
	var runs, problems []string
	seen := map[string]bool{}
	for i := count - 1; i >= max(0, count-maxRunsRead); i-- {
		v, err := c.Get(runSlotKey(i))
		if errors.Is(err, tcpstore.ErrNoKey) {
			continue // taken and not yet written
		}
		if err != nil {
			return nil, nil, storeErr(ctx, storeAddr, "reading "+runSlotKey(i), err)
		}
		id := string(v)
		if checkRunID(id) != nil {
			problems = append(problems, fmt.Sprintf("%s holds %s, not a run id; skipped", runSlotKey(i), jobtext.Quote(id, jobtext.Name)))
			continue
		}
		if !seen[id] {
			seen[id] = true
			runs = append(runs, id)
		}
	}
	return runs, problems, nil
}

// ReadStore lists the nodes registered under runID: ours (Kind daemon)
// and original Probing agents (Kind probing) from its torchrun keys. A
// missing or garbled slot is a problem, not an error; an unreachable,
// silent or garbled store is an error within timeout.
func ReadStore(ctx context.Context, storeAddr, runID string, timeout time.Duration) ([]cluster.Node, []string, error) {
	if err := checkRunID(runID); err != nil {
		return nil, nil, err
	}
	c, ctx, done, err := dial(ctx, storeAddr, timeout)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	var (
		nodes    []cluster.Node
		problems []string
		at       = map[string]int{} // Addr → index in nodes
	)
	put := func(n cluster.Node) {
		if i, ok := at[n.Addr]; ok {
			nodes[i] = n
			return
		}
		at[n.Addr] = len(nodes)
		nodes = append(nodes, n)
	}

	raw, err := c.Get(countKey(runID))
	count := int64(0)
	switch {
	case errors.Is(err, tcpstore.ErrNoKey):
	case err != nil:
		return nil, nil, storeErr(ctx, storeAddr, "reading "+countKey(runID), err)
	default:
		count, err = strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil || count < 0 {
			problems = append(problems, fmt.Sprintf("%s holds %s, not a count; our slots were not read", countKey(runID), jobtext.Quote(string(raw), jobtext.Name)))
			count = 0
		}
	}
	if count > tcpstore.MaxKeys {
		problems = append(problems, fmt.Sprintf("%s says %d nodes registered; read the first %d", countKey(runID), count, tcpstore.MaxKeys))
		count = tcpstore.MaxKeys
	}
	for slot := int64(0); slot < count; slot++ {
		key := slotKey(runID, slot)
		raw, err := c.Get(key)
		if errors.Is(err, tcpstore.ErrNoKey) {
			problems = append(problems, fmt.Sprintf("%s is missing (a node took the slot and did not write it, or died doing so)", key))
			continue
		}
		if errors.Is(err, tcpstore.ErrTooLarge) {
			problems = append(problems, fmt.Sprintf("%s holds over %d bytes, more than a node's entry takes; skipped", key, tcpstore.MaxValue))
			continue
		}
		if err != nil {
			return nil, nil, storeErr(ctx, storeAddr, "reading "+key, err)
		}
		if len(raw) > maxSlotBytes {
			// Anyone who reaches the store can write a slot: 300 slots of
			// 1 MB names took list_cluster_nodes 36 s and 5 GB (issue 23).
			problems = append(problems, fmt.Sprintf("%s holds %d bytes, over the %d a node's entry takes; skipped", key, len(raw), maxSlotBytes))
			continue
		}
		var n cluster.Node
		if err := json.Unmarshal(raw, &n); err != nil {
			problems = append(problems, fmt.Sprintf("%s is not a node's JSON: %v", key, err))
			continue
		}
		if _, err := checkHostPort(n.Addr); err != nil {
			problems = append(problems, fmt.Sprintf("%s: address %s: %v; skipped", key, jobtext.Quote(n.Addr, jobtext.Name), err))
			continue
		}
		if err := cluster.CheckNodeName(n.Host); n.Host != "" && err != nil {
			problems = append(problems, fmt.Sprintf("%s: node name %s: %v; skipped", key, jobtext.Quote(n.Host, jobtext.Name), err))
			continue
		}
		if n.Kind != cluster.KindProbing {
			n.Kind = cluster.KindDaemon
		}
		n.Source = "store"
		put(n)
	}

	// Probing's agents: each node's local rank 0, then global rank 0.
	for g := 0; g < tcpstore.MaxKeys; g++ {
		key := probingLocal0Key(runID, g)
		raw, err := c.Get(key)
		if errors.Is(err, tcpstore.ErrNoKey) {
			break
		}
		if errors.Is(err, tcpstore.ErrTooLarge) {
			problems = append(problems, fmt.Sprintf("%s (Probing's) holds over %d bytes; skipped", key, tcpstore.MaxValue))
			continue
		}
		if err != nil {
			return nil, nil, storeErr(ctx, storeAddr, "reading "+key, err)
		}
		n, err := probingNode(raw)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s (Probing's): %v", key, err))
			continue
		}
		if n.NodeRank < 0 {
			n.NodeRank = g
		}
		put(n)
	}
	raw, err = c.Get(probingMasterKey(runID))
	switch {
	case errors.Is(err, tcpstore.ErrNoKey):
	case err != nil:
		return nil, nil, storeErr(ctx, storeAddr, "reading "+probingMasterKey(runID), err)
	default:
		n, err := probingNode(raw)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s (Probing's): %v", probingMasterKey(runID), err))
			break
		}
		n.Ranks = "0" // the master key is global rank 0's
		if i, ok := at[n.Addr]; ok {
			if nodes[i].Kind == cluster.KindProbing && nodes[i].Ranks == "" {
				nodes[i].Ranks = "0"
			}
		} else {
			put(n)
		}
	}
	return nodes, problems, nil
}

// probingNode reads Probing's {addr, http_base, bound[, node_rank]}.
// maxSlotBytes bounds one node's entry in the store (an address, a node
// name, a rank set as ranges).
const maxSlotBytes = 16 << 10

func probingNode(raw []byte) (cluster.Node, error) {
	if len(raw) > maxSlotBytes {
		return cluster.Node{}, fmt.Errorf("%d bytes, over the %d a node's entry takes", len(raw), maxSlotBytes)
	}
	var p probingInfo
	if err := json.Unmarshal(raw, &p); err != nil {
		return cluster.Node{}, fmt.Errorf("not Probing's {addr, http_base, bound} JSON: %v", err)
	}
	addr := p.Addr
	if addr == "" && p.HTTPBase != "" {
		if u, err := url.Parse(p.HTTPBase); err == nil {
			addr = u.Host
		}
	}
	host, err := checkHostPort(addr)
	if err != nil {
		return cluster.Node{}, fmt.Errorf("address %s: %v", jobtext.Quote(addr, jobtext.Name), err)
	}
	n := cluster.Node{Host: host, Addr: addr, NodeRank: -1, Kind: cluster.KindProbing, Source: "store"}
	if p.NodeRank != nil && *p.NodeRank >= 0 {
		n.NodeRank = *p.NodeRank
	}
	return n, nil
}

// StoreRuns is the runs to read from the store: the environment's when it
// names one; else those the run index lists (said when there are
// several); else the ids a run has without an index (daemons of an older
// version): the store's port (MASTER_PORT is the run id when nothing else
// names it), "none" (torchrun's default rendezvous id) and "run".
func StoreRuns(ctx context.Context, storeAddr string, getenv func(string) string, timeout time.Duration) ([]string, []string) {
	if RunIDSet(getenv) {
		return []string{RunID(getenv)}, nil
	}
	runs, problems, err := RunsInStore(ctx, storeAddr, timeout)
	if err != nil {
		problems = append(problems, fmt.Sprintf("the run index of %s: %v", storeAddr, err))
	}
	if len(runs) > 1 {
		problems = append(problems, fmt.Sprintf("the store %s holds %d runs (%s, newest first): the nodes of each are listed; set TORCHELASTIC_RUN_ID to the job's run id to read one", storeAddr, len(runs), strings.Join(capRuns(runs, 5), ", ")))
	}
	if len(runs) > 0 {
		return runs, problems
	}
	var guess []string
	if _, port, err := net.SplitHostPort(storeAddr); err == nil && port != "" {
		guess = append(guess, port)
	}
	return append(guess, "none", "run"), problems
}

// capRuns quotes the first n run ids (the store's text) and counts the
// rest.
func capRuns(runs []string, n int) []string {
	var out []string
	for i, r := range runs {
		if i == n {
			return append(out, fmt.Sprintf("and %d more", len(runs)-n))
		}
		out = append(out, jobtext.Quote(r, jobtext.Name))
	}
	return out
}
