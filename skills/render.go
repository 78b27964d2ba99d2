package skills

import (
	"fmt"
	"io"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// WriteText renders a run for a terminal: status, findings first, then
// each step in a line, then the summary and next steps.
func (r *RunResult) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): %s\n", r.Title, r.SkillID, strings.ToUpper(string(r.Status)))
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "  [%s] %s: %s\n", f.Severity, f.RuleID, f.Message)
	}
	if len(r.Findings) == 0 {
		b.WriteString("  no findings\n")
	}
	b.WriteString("\nSteps:\n")
	for _, s := range r.Steps {
		line := string(s.Status)
		switch {
		case s.RowCount != nil:
			line += fmt.Sprintf(", %d row(s)", *s.RowCount)
		case s.Reason != "":
			line += ": " + s.Reason
		case s.Message != "":
			line += ": " + s.Message
		}
		fmt.Fprintf(&b, "  %-28s %s\n", s.StepID, line)
	}
	if r.Summary != "" {
		fmt.Fprintf(&b, "\n%s\n", r.Summary)
	}
	if len(r.NextSteps) > 0 {
		b.WriteString("\nNext:\n")
		for _, n := range r.NextSteps {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	// A finding or a step's error may carry job or node text: quoted where
	// it was composed; no control character reaches the terminal raw.
	_, err := io.WriteString(w, jobtext.Clean(b.String()))
	return err
}
