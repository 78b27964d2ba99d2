package tools

import (
	"fmt"
	"sort"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// maxTextSetLines bounds the per-process lines of set_config's text.
const maxTextSetLines = 16

// ModelText is what changed, where, and which processes failed.
func (r SetConfigResult) ModelText() string {
	var b strings.Builder
	if len(r.Processes) == 0 {
		fmt.Fprintf(&b, "%s: %s = %s on this server (was %s).\n", r.Status, r.Key, r.Value, orDash(r.Previous))
		return b.String()
	}
	failed := 0
	for _, p := range r.Processes {
		if p.Error != "" {
			failed++
		}
	}
	fmt.Fprintf(&b, "%s: %s = %s on %d of %d process(es)", r.Status, r.Key, r.Value, len(r.Processes)-failed, len(r.Processes))
	if failed > 0 {
		fmt.Fprintf(&b, "; %d failed (below)", failed)
	}
	b.WriteString(".\n")
	// Failures first: they are what needs acting on.
	ps := append([]ProcessSet(nil), r.Processes...)
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Error != "" && ps[j].Error == "" })
	for i, p := range ps {
		if i == maxTextSetLines {
			fmt.Fprintf(&b, "  … %d more process(es) in structured content: processes\n", len(ps)-i)
			break
		}
		if p.Error != "" {
			fmt.Fprintf(&b, "  %s: failed: %s\n", stacks.Who(p.PID, p.Rank, ""), jobtext.Quote(p.Error, jobtext.Message))
			continue
		}
		// What the process says it holds now and before: its text.
		fmt.Fprintf(&b, "  %s: %s (was %s)\n", stacks.Who(p.PID, p.Rank, ""), jobtext.Quote(p.Value, jobtext.Message), jobtext.Quote(p.Previous, jobtext.Message))
	}
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
