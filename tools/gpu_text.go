package tools

import (
	"fmt"
	"strings"

	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// Bounds of gpu_status's text.
const (
	maxGPUText      = 12000
	maxGPUNodeLines = 20
)

// ModelText is the merged account first, then the odd nodes' lines, the
// page of devices, and the coverage; within maxGPUText, every cut said.
func (r GPUStatusResult) ModelText() string {
	lines := []string{strings.TrimRight(r.Summary, "\n")}
	if r.NodesTotal > 1 || len(r.Devices) == 0 {
		lines = append(lines, "Nodes:")
		for i, n := range r.Nodes {
			if i == maxGPUNodeLines {
				lines = append(lines, fmt.Sprintf("  … %d more nodes not listed here (the structured nodes list has %d; host= picks one)", r.NodesTotal-i, len(r.Nodes)))
				break
			}
			l := fmt.Sprintf("  %s: %s", hostText(n.Host), n.Line)
			if n.Source != "" {
				l += " [" + jobtext.Word(n.Source) + "]"
			}
			lines = append(lines, l)
		}
	}
	if len(r.Devices) > 0 {
		lines = append(lines, fmt.Sprintf("Devices (%d of %d, faults and odd ones first):", len(r.Devices), r.DevicesTotal))
		for _, d := range r.Devices {
			name := "unnamed GPU"
			if d.Name != "" {
				name = jobtext.Quote(d.Name, jobtext.Name)
			}
			l := fmt.Sprintf("  %s (%s) %s", devWhere(d), name, d.Signature)
			if st := gpu.Stats([]gpu.Snapshot{d.Snapshot}, d.Signature, d.Why); st != "" {
				l += ": " + st
			}
			lines = append(lines, l)
		}
	}
	if r.NextOffset != nil {
		lines = append(lines, fmt.Sprintf("Truncated: %d more devices; call again with offset %d (or host= for one node).", r.DevicesTotal-*r.NextOffset, *r.NextOffset))
	}
	if r.Coverage != nil {
		lines = append(lines, "Scope: the whole job, "+r.Coverage.Text)
		for _, p := range r.Coverage.Problems {
			lines = append(lines, "  "+clip(p, jobtext.Line))
		}
	}
	return boundLines(lines, maxGPUText)
}
