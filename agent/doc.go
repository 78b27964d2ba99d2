// Package agent will talk to the in-process agents that live inside every
// training rank: discovery of their control sockets, a client with
// deadlines, fan-out across ranks, and /proc evidence for wedged processes.
// The Python agent itself will live under agent/python and be embedded in
// the binary. Nothing is implemented yet: see the "in-process agent" issue.
package agent
