// Package cluster holds what every part of the whole-job view shares: a
// node of the job as membership knows it, and the environment names that
// configure discovery and the fan-out. The parts are membership (who the
// nodes are), node (the daemon each node runs), fanout (the coordinator's
// client) and fedsql (SQL over every node's tables). No MCP imports.
package cluster

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/probing-mcp/probing-mcp/internal/netaddr"
)

// LoopbackHost is whether h is a loopback address or name.
func LoopbackHost(h string) bool { return netaddr.Loopback(h) }

// Kinds of node endpoint.
const (
	// KindDaemon is a probing-mcp node daemon (the API in node/).
	KindDaemon = "probing-mcp"
	// KindProbing is an original Probing agent found through its torchrun
	// keys or its heartbeats: listed, not queried (it serves no node API).
	KindProbing = "probing"
)

// Node is one node of the job as membership knows it.
type Node struct {
	// Host names the node: PROBING_NODE_HOST, else its hostname.
	Host string `json:"host"`
	// Addr is host:port of its endpoint, exactly as it advertised it
	// (never rewritten to another host's address).
	Addr string `json:"addr"`
	// NodeRank is the node's index in the job (torchrun's GROUP_RANK,
	// SLURM_NODEID), -1 when unknown.
	NodeRank int `json:"node_rank"`
	// Ranks are the global ranks it said it holds, as ranges; "" unknown.
	Ranks string `json:"ranks,omitempty"`
	// Kind is KindDaemon or KindProbing.
	Kind string `json:"kind"`
	// Source is where membership learnt of it: "store", "peers", "slurm",
	// "heartbeat", "disk".
	Source string `json:"source"`
	// LastSeen is when a source last vouched for it (registration,
	// heartbeat, answer); zero when never.
	LastSeen time.Time `json:"last_seen,omitempty"`
}

// Environment names of the whole-job view.
const (
	EnvNodeHost      = "PROBING_NODE_HOST"      // this node's name
	EnvAdvertiseAddr = "PROBING_ADVERTISE_ADDR" // the address peers reach this node at
	EnvAuthToken     = "PROBING_AUTH_TOKEN"     // shared by the coordinator and every daemon
	EnvNodeSwitch    = "PROBING_MCP_NODE"       // off: the agent starts no daemon
	EnvConcurrency   = "PROBING_FANOUT_CONCURRENCY"
	EnvPeerTimeout   = "PROBING_REMOTE_QUERY_TIMEOUT_SECS"
	EnvDeadline      = "PROBING_STACK_FANOUT_DEADLINE_SEC"
	EnvStrict        = "PROBING_FANOUT_STRICT"
	EnvStaleSec      = "PROBING_CLUSTER_STALE_SEC"
)

// MaxNodeName bounds a node's name in bytes (a DNS name is at most 253).
const MaxNodeName = 255

// CheckNodeName says why h cannot name a node: empty, over MaxNodeName
// bytes, or holding a control character or one no host name has (space,
// / \ @ ? #, as checkHostPort in membership refuses in an address).
func CheckNodeName(h string) error {
	switch {
	case h == "":
		return errors.New("empty")
	case len(h) > MaxNodeName:
		return fmt.Errorf("over %d bytes", MaxNodeName)
	case strings.ContainsFunc(h, func(r rune) bool { return r < 0x20 || r == 0x7f || r == utf8.RuneError }):
		return errors.New("control characters or invalid UTF-8")
	case strings.ContainsAny(h, " \t/\\@?#"):
		return errors.New("characters no host name has (space, /, \\, @, ?, #)")
	}
	return nil
}

// NodeNameFromEnv is PROBING_NODE_HOST, trimmed: "" when it is not set,
// an error when it is set to something that cannot name a node (the
// environment may be another process's, read from /proc: hostile).
func NodeNameFromEnv(getenv func(string) string) (string, error) {
	h := strings.TrimSpace(getenv(EnvNodeHost))
	if h == "" {
		return "", nil
	}
	if err := CheckNodeName(h); err != nil {
		return "", fmt.Errorf("%s=%q is not a node name: %v", EnvNodeHost, clip(h), err)
	}
	return h, nil
}

// NodeRankFromEnv is the node's index in the job: torchrun's GROUP_RANK,
// else SLURM_NODEID; -1 when neither is set, an error when the first set
// is not a number in 0..2^24.
func NodeRankFromEnv(getenv func(string) string) (int, error) {
	for _, k := range []string{"GROUP_RANK", "SLURM_NODEID"} {
		v := strings.TrimSpace(getenv(k))
		if v == "" {
			continue
		}
		r, err := strconv.Atoi(v)
		if err != nil || r < 0 || r >= 1<<24 {
			return -1, fmt.Errorf("%s=%q is not a node rank", k, clip(v))
		}
		return r, nil
	}
	return -1, nil
}

// HostName is this node's name as the job's membership knows it:
// PROBING_NODE_HOST when it names a node, else the hostname ("" when
// neither can be read).
func HostName(getenv func(string) string) string {
	if h, err := NodeNameFromEnv(getenv); err == nil && h != "" {
		return h
	}
	h, _ := os.Hostname()
	return h
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}
