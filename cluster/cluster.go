// Package cluster holds what every part of the whole-job view shares: a
// node of the job as membership knows it, and the environment names that
// configure discovery and the fan-out. The parts are membership (who the
// nodes are), node (the daemon each node runs), fanout (the coordinator's
// client) and fedsql (SQL over every node's tables). No MCP imports.
package cluster

import (
	"net"
	"os"
	"strings"
	"time"
)

// LoopbackHost is whether h is a loopback address or name.
func LoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

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

// HostName is this node's name as the job's membership knows it:
// PROBING_NODE_HOST, else the hostname ("" when neither can be read).
func HostName(getenv func(string) string) string {
	if h := strings.TrimSpace(getenv(EnvNodeHost)); h != "" {
		return h
	}
	h, _ := os.Hostname()
	return h
}
