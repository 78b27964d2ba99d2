package tools

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// againSet: a rank set named again after the summary line gave it is cut
// shorter (as stacks' text does).
const againSet = 40

// ModelText is the merge as stacks renders it for every reader (the
// groups, what was collapsed, cut or failed, merge=false's listing), then
// what only the tool knows: the sources, the history rows and the
// whole-job coverage.
func (r GetStacksResult) ModelText() string {
	var b strings.Builder
	o := stacks.TextOptions{Processes: r.Processes}
	if c := r.Coverage; c != nil {
		o.WholeJob, o.Asked, o.Answered = true, c.Asked, c.Answered
	}
	b.WriteString(r.Merged.Text(o))
	if s := sourcesText(r.Sources, r.Merged.Ranks); s != "" {
		b.WriteString("Sources: " + s + "\n")
	}
	if len(r.HistoryIDs) > 0 {
		b.WriteString("Stored: history.stack_captures id(s) " + ints64Set(r.HistoryIDs) + "\n")
	}
	b.WriteString(coverageText(r.Coverage))
	return b.String()
}

// sourcesText groups the sources: "agent: pids 101,102; faulthandler: pid
// 103" (this node), or each source's ranks (the whole job).
func sourcesText(src map[string]string, all string) string {
	if len(src) == 0 {
		return ""
	}
	by := map[string][]string{}
	for k, v := range src {
		if _, err := strconv.Atoi(k); err == nil {
			by[v] = append(by[v], k) // pid → source
		} else {
			if v == "ranks "+all {
				v = "every rank"
			}
			by[k] = append(by[k], shortSetsTo(v, againSet)) // source → "ranks …"
		}
	}
	var parts []string
	for s, ws := range by {
		sort.Slice(ws, func(i, j int) bool {
			a, ea := strconv.Atoi(ws[i])
			c, ec := strconv.Atoi(ws[j])
			if ea == nil && ec == nil {
				return a < c
			}
			return ws[i] < ws[j]
		})
		list := ws
		if len(list) > 16 {
			list = append(slices.Clone(ws[:16]), fmt.Sprintf("… %d more", len(ws)-16))
		}
		w := strings.Join(list, ",")
		if _, err := strconv.Atoi(ws[0]); err == nil {
			w = "pid(s) " + w
		}
		parts = append(parts, jobtext.Word(s)+": "+w)
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
