package tools

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/skills"
)

// Bounds of the skill tools' text.
const (
	maxTextStepRows  = 10
	maxTextStepTable = 2 << 10
	maxTextStepSQL   = 800
	maxTextSkillText = 1 << 10
)

// ModelText is one line per skill: id, title, category, where it came from.
func (r ListSkillsResult) ModelText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d skill(s); run one with run_skill skill_id=<id>, see its steps with plan_skill.\n", len(r.Skills))
	for _, s := range r.Skills {
		fmt.Fprintf(&b, "  %s — %s [%s, %s", s.ID, s.Title, orDash(s.Category), s.Root)
		if len(s.Shadows) > 0 {
			b.WriteString(", overrides " + strings.Join(s.Shadows, ","))
		}
		fmt.Fprintf(&b, ", %d step(s)", s.Steps)
		if s.Entry {
			b.WriteString(", entry point")
		}
		b.WriteString("]")
		if s.Description != "" {
			b.WriteString(": " + clip(s.Description, 160))
		}
		b.WriteString("\n")
	}
	if len(r.Problems) > 0 {
		b.WriteString("Skills that failed to load:\n")
		for _, p := range r.Problems {
			b.WriteString("  " + clip(p, 300) + "\n")
		}
		if r.Omitted > 0 {
			fmt.Fprintf(&b, "  … %d more\n", r.Omitted)
		}
	}
	return b.String()
}

// planAnswer is plan_skill's result with its text (the JSON is the plan's).
type planAnswer struct {
	*skills.PlanResult
}

// ModelText is the skill, its parameters, and each step expanded: its
// SQL or tool call, its condition, and why a run would skip it.
func (p planAnswer) ModelText() string {
	if p.PlanResult == nil {
		return "no plan\n"
	}
	var b strings.Builder
	skip := 0
	for _, s := range p.Steps {
		if s.SkipReason != "" {
			skip++
		}
	}
	fmt.Fprintf(&b, "Plan of %s (%s): %d step(s), %d would be skipped; nothing was run (run_skill runs it).\n", p.Title, p.SkillID, len(p.Steps), skip)
	if len(p.Parameters) > 0 {
		var kv []string
		for _, k := range sortedKeys(p.Parameters) {
			kv = append(kv, k+"="+clip(p.Parameters[k], 80))
		}
		b.WriteString("Parameters: " + strings.Join(kv, ", ") + "\n")
	}
	for i, s := range p.Steps {
		fmt.Fprintf(&b, "%d. %s [%s]", i+1, s.ID, s.Type)
		if s.Title != "" {
			b.WriteString(" " + s.Title)
		}
		if s.Cluster {
			b.WriteString(" (fans out to every node)")
		}
		b.WriteString("\n")
		switch {
		case s.SQL != "":
			b.WriteString("   sql: " + clip(s.SQL, maxTextStepSQL) + "\n")
		case s.Tool != "":
			b.WriteString("   tool: " + s.Tool + argsText(s.Args) + "\n")
		case s.Path != "":
			b.WriteString("   get: " + s.Path + "\n")
		case s.Action != "":
			b.WriteString("   action: " + clip(s.Action, 200) + "\n")
		}
		if s.When != "" {
			b.WriteString("   when: " + clip(s.When, 200) + "\n")
		}
		if s.SkipReason != "" {
			b.WriteString("   would be skipped: " + clip(s.SkipReason, 200) + "\n")
		}
	}
	for _, n := range p.NextSteps {
		b.WriteString("Next: " + clip(n, 300) + "\n")
	}
	return b.String()
}

func argsText(args map[string]string) string {
	if len(args) == 0 {
		return ""
	}
	ks := make([]string, 0, len(args))
	for k := range args {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var kv []string
	for _, k := range ks {
		kv = append(kv, k+"="+clip(args[k], 80))
	}
	return " " + strings.Join(kv, " ")
}

// runAnswer is run_skill's result with its text (the JSON is the run's).
type runAnswer struct {
	*skills.RunResult
}

// ModelText is the status and summary first, the findings, each step's
// status with its data (a few rows, or its text) bounded, then the next
// steps.
func (r runAnswer) ModelText() string {
	if r.RunResult == nil {
		return "no run\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): %s", r.Title, r.SkillID, strings.ToUpper(string(r.Status)))
	if r.Summary != "" {
		b.WriteString(" — " + shortSets(strings.TrimSpace(r.Summary)))
	}
	b.WriteString("\n")
	if len(r.Findings) == 0 {
		b.WriteString("No findings.\n")
	}
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "[%s] %s: %s\n", f.Severity, f.RuleID, shortSets(clip(f.Message, 600)))
	}
	b.WriteString("Steps:\n")
	for _, s := range r.Steps {
		fmt.Fprintf(&b, "  %s: %s", s.StepID, s.Status)
		if s.RowCount != nil {
			fmt.Fprintf(&b, ", %d row(s)", *s.RowCount)
		}
		for _, w := range []string{s.Reason, s.Message, s.Note} {
			if w != "" {
				b.WriteString("; " + clip(w, 300))
			}
		}
		if s.Truncated {
			b.WriteString(" (cut)")
		}
		if m := s.ClusterMeta; m != nil && m.Partial {
			fmt.Fprintf(&b, "; partial: %d node(s) queried, failed: %s", m.NodesQueried, jobtext.Quote(strings.Join(m.NodesFailed, ", "), 200))
		}
		b.WriteString("\n")
		if len(s.Columns) > 0 && len(s.Rows) > 0 {
			rows := make([][]any, 0, min(len(s.Rows), maxTextStepRows))
			for i, row := range s.Rows {
				if i == maxTextStepRows {
					break
				}
				rows = append(rows, row.Values())
			}
			var t strings.Builder
			n := writeTable(&t, s.Columns, rows, maxTextStepTable)
			for _, l := range strings.SplitAfter(strings.TrimSuffix(t.String(), "\n"), "\n") {
				b.WriteString("    " + strings.TrimSuffix(l, "\n") + "\n")
			}
			if n < len(s.Rows) {
				fmt.Fprintf(&b, "    … %d of %d row(s) shown (structured content: steps[].rows; query runs the step's SQL with a limit)\n", n, len(s.Rows))
			}
		} else if j := strings.TrimSpace(s.Text); strings.HasPrefix(j, "{") {
			// A tool step's text is the tool's JSON: its summary says it.
			var v struct {
				Summary string `json:"summary"`
			}
			if json.Unmarshal([]byte(j), &v) == nil && v.Summary != "" {
				b.WriteString("    " + clip(shortSets(v.Summary), 400) + "\n")
			}
			fmt.Fprintf(&b, "    (the tool's whole result, %d bytes, is in structured content steps[].text; plan_skill shows the call to make it yourself)\n", len(j))
		} else if s.Text != "" {
			// An agent's answer: the job's text, a line a quote.
			if left, _ := quoteLines(&b, strings.TrimRight(s.Text, "\n"), "    ", maxTextSkillText); left > 0 {
				fmt.Fprintf(&b, "    … the last %d of %d bytes not shown (structured content: steps[].text)\n", left, len(s.Text))
			}
		}
	}
	for _, n := range r.NextSteps {
		b.WriteString("Next: " + clip(n, 300) + "\n")
	}
	if r.DataQuality.PartialClusterFanout {
		b.WriteString("Data quality: a step's fan-out over the nodes was partial (its cluster_meta says which failed).\n")
	}
	if r.Truncated {
		b.WriteString("Cut: the run's result was shrunk to its size cap (steps marked (cut) lost rows or text; the findings saw them all).\n")
	}
	return b.String()
}
