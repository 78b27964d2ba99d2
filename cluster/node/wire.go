// Package node is the node daemon (`probing-mcp node`): one per node,
// outside the training processes, it serves the node's evidence to the
// job's coordinator over HTTP (JSON, a bearer token off loopback). It
// answers with the same sources the server uses on its own node (agents,
// the faulthandler and /proc fallbacks, Flight Recorder snapshots, the
// ring tables' SQL), so a rank whose GIL is held, or a node whose local
// rank 0 is the stuck one, still answers through it. No MCP imports.
package node

import (
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// Paths of the node API.
const (
	PathHealth   = "/health"
	PathInfo     = "/v1/node"
	PathStacks   = "/v1/stacks"
	PathEvidence = "/v1/evidence"
	PathFR       = "/v1/flight_recorder"
	PathTables   = "/v1/tables"
	PathScan     = "/v1/scan"
	PathGPU      = "/v1/gpu"
)

// TimeoutHeader carries the caller's time left, in milliseconds: a
// duration, not a deadline, so that clocks that differ between nodes do
// not matter. Each level answers within it with what it has.
const TimeoutHeader = "X-Probing-Timeout-Ms"

// RankInfo is one process of the node as its agents say.
type RankInfo struct {
	Rank      int    `json:"rank"`
	LocalRank int    `json:"local_rank"`
	PID       int    `json:"pid"`
	Role      string `json:"role,omitempty"`
	Alive     bool   `json:"alive"`
	Kind      string `json:"kind"`
}

// Info is what GET /v1/node answers.
type Info struct {
	Node    cluster.Node `json:"node"`
	Version string       `json:"version"`
	// NowNS is the node's clock as it answered (the coordinator compares
	// it with its own to say when clocks differ).
	NowNS    int64      `json:"now_ns"`
	World    int        `json:"world"`
	Ranks    []RankInfo `json:"ranks"`
	Problems []string   `json:"problems,omitempty"`
}

// StacksRequest selects the node's ranks ("" every live one).
type StacksRequest struct {
	Ranks string `json:"ranks,omitempty"`
}

// StacksReply is every selected process's threads.
type StacksReply struct {
	Processes []stacks.Process `json:"processes"`
	Problems  []string         `json:"problems,omitempty"`
}

// EvidenceRequest asks for the evidence bundle of the diagnosis.
type EvidenceRequest struct {
	CommPerRank int `json:"comm_per_rank,omitempty"`
	// Pulse asks for liveness and ring progress only (evidence.Options.Pulse).
	Pulse bool `json:"pulse,omitempty"`
}

// EvidenceReply is the node's bundle, its Flight Recorder dumps raw.
type EvidenceReply struct {
	Bundle *evidence.Bundle `json:"bundle"`
}

// FRRequest selects the ranks whose Flight Recorder is snapshotted.
type FRRequest struct {
	Ranks      string `json:"ranks,omitempty"`
	OnlyActive bool   `json:"only_active,omitempty"`
}

// FRReply is their dumps, raw, and what failed.
type FRReply struct {
	Dumps    []evidence.FRDump `json:"dumps"`
	Problems []string          `json:"problems,omitempty"`
}

// GPURequest asks for the node's GPUs (nothing to select: a node has a
// few GPUs, and the coordinator bounds what it keeps).
type GPURequest struct{}

// GPUReply is the node's GPU report (evidence.NodeGPU): the live
// sampler's, the rings', or why there is none.
type GPUReply struct {
	Report gpu.Report `json:"report"`
}
