package skills

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/probing-mcp/probing-mcp/diagnosis"
)

// maxVerdictFindings bounds the findings one diagnosis gives a run.
const maxVerdictFindings = 5

// verdict turns the diagnose_hang result of a skill's verdict step into
// the run's findings (one per hypothesis, in the diagnosis's order) and
// its summary. A verdict step that failed or answered something else is
// an error finding: a skill never falls back to guessing the culprit.
func verdict(step string, raw json.RawMessage, sr *StepResult) ([]Finding, string) {
	if sr == nil || sr.Status != StatusOK || len(raw) == 0 {
		why := "it did not run"
		if sr != nil {
			why = fmt.Sprintf("its status is %s: %s", sr.Status, orDefault(sr.Message, sr.Reason))
		}
		return []Finding{{RuleID: "diagnosis_unavailable", Severity: SeverityError,
			Message: fmt.Sprintf("No verdict: the diagnosis step `%s` failed (%s). Read the other steps' listings, and call diagnose_hang directly.", step, why)}}, ""
	}
	var rep diagnosis.Report
	if err := json.Unmarshal(raw, &rep); err != nil || rep.State == "" {
		return []Finding{{RuleID: "diagnosis_unreadable", Severity: SeverityError,
			Message: fmt.Sprintf("No verdict: the diagnosis step `%s` answered something that is not a diagnosis (%d bytes).", step, len(raw))}}, ""
	}
	var out []Finding
	for i, h := range rep.Hypotheses {
		if i == maxVerdictFindings {
			out = append(out, Finding{RuleID: "diagnosis_more", Severity: SeverityInfo,
				Message: fmt.Sprintf("%d more hypotheses: see the diagnosis step.", len(rep.Hypotheses)-i)})
			break
		}
		out = append(out, Finding{RuleID: "diagnosis_" + h.Category, Severity: verdictSeverity(rep.State, h), Message: hypothesisLine(h)})
	}
	for _, dq := range rep.DataQuality {
		if len(out) >= maxVerdictFindings+2 {
			break
		}
		out = append(out, Finding{RuleID: "diagnosis_data_quality", Severity: SeverityInfo, Message: "Data quality: " + dq})
	}
	return out, rep.Summary
}

func verdictSeverity(state string, h diagnosis.Hypothesis) Severity {
	switch {
	case h.Category == diagnosis.CatHealthy:
		return SeverityInfo
	case h.Category == diagnosis.CatStraggler, h.Confidence == diagnosis.Low:
		return SeverityWarning
	case state == diagnosis.StateStalled || state == diagnosis.StateDead:
		return SeverityError
	}
	return SeverityWarning
}

func hypothesisLine(h diagnosis.Hypothesis) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s confidence)", h.Category, h.Confidence)
	if h.Culprits != "" {
		fmt.Fprintf(&b, ": culprit %s", h.Culprits)
	}
	if h.Where != nil {
		fmt.Fprintf(&b, " at %s", h.Where)
	}
	if h.Collateral != "" {
		fmt.Fprintf(&b, "; waiting for it: %s", h.Collateral)
	}
	if len(h.Evidence) > 0 {
		fmt.Fprintf(&b, ". %s", h.Evidence[0].Text)
	}
	if h.Confirm != "" {
		fmt.Fprintf(&b, ". Confirm: %s", h.Confirm)
	}
	return b.String()
}
