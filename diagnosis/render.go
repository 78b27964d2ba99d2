package diagnosis

import (
	"fmt"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Bounds of the default answer: what a model reads first must stay small
// at 1024 ranks (the per-rank listing pages on request).
const (
	MaxHypotheses = 8
	MaxRankGroups = 24
	MaxDataLines  = 12
	maxTextLine   = 400
)

// Bound cuts the report's lists to the default bounds and says what it
// cut in Omitted: never a silent truncation.
func (r *Report) Bound() {
	if n := len(r.Hypotheses) - MaxHypotheses; n > 0 {
		r.Hypotheses = r.Hypotheses[:MaxHypotheses]
		r.Omitted = append(r.Omitted, fmt.Sprintf("%d lower-ranked hypotheses", n))
	}
	if n := len(r.Ranks) - MaxRankGroups; n > 0 {
		r.Ranks = r.Ranks[:MaxRankGroups]
		r.Omitted = append(r.Omitted, fmt.Sprintf("%d rank groups (detail \"ranks\" lists every rank, paged)", n))
	}
	for i := range r.Hypotheses {
		// The culprit's frame is the job's text: clipped in the JSON too
		// (after its source line was read through the whole path).
		if w := r.Hypotheses[i].Where; w != nil {
			r.Hypotheses[i].Where = &Where{File: jobtext.ClipTail(w.File, jobtext.Path), Line: w.Line,
				Function: jobtext.Clip(w.Function, jobtext.Func), Source: jobtext.Clip(w.Source, jobtext.Line)}
		}
	}
	if n := len(r.DataQuality) - MaxDataLines; n > 0 {
		r.DataQuality = append(r.DataQuality[:MaxDataLines:MaxDataLines], fmt.Sprintf("… and %d more data-quality notes", n))
	}
}

// Text renders the report for a model: the verdict first, then each
// hypothesis with its proof and how to test it, then who does what.
func (r *Report) Text() string {
	var b strings.Builder
	line := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		body := strings.TrimLeft(s, " ")
		s = s[:len(s)-len(body)] + jobtext.Clean(oneLine(body))
		s = jobtext.Cut(s, maxTextLine) // a quote cut open is closed
		b.WriteString(s)
		b.WriteByte('\n')
	}
	line("%s", r.Summary)
	if strings.Contains(r.Summary, r.StateWhy) {
		line("State: %s.", r.State)
	} else {
		line("State: %s (%s).", r.State, r.StateWhy)
	}
	for i, h := range r.Hypotheses {
		b.WriteByte('\n')
		head := fmt.Sprintf("%d. %s, %s confidence", i+1, h.Category, h.Confidence)
		if h.Culprits != "" {
			head += ": culprit " + setWords(h.Culprits)
		}
		if h.Collateral != "" {
			head += "; waiting for it: " + setWords(h.Collateral)
		}
		line("%s", head)
		if w := h.Where; w != nil {
			line("   where: %s:%d in %s", jobtext.QuoteTail(w.File, jobtext.Path), w.Line, jobtext.Quote(w.Function, jobtext.Func))
			if w.Source != "" {
				line("          %s", jobtext.Quote(strings.TrimSpace(w.Source), jobtext.Line))
			}
		}
		for _, e := range h.Evidence {
			line("   - [%s] %s", e.Source, e.Text)
		}
		// The next step last: how to refute it, the call that confirms
		// it, then what to do.
		if h.Refute != "" {
			line("   refuted if: %s", h.Refute)
		}
		if h.Confirm != "" {
			line("   confirm: %s", h.Confirm)
		}
		if h.Act != "" {
			line("   then: %s", h.Act)
		}
	}
	if len(r.Ranks) > 0 {
		b.WriteByte('\n')
		line("Ranks:")
		for _, g := range r.Ranks {
			line("  %s: %s", shortSet(g.Ranks), g.Doing)
		}
	}
	if len(r.DataQuality) > 0 {
		b.WriteByte('\n')
		line("Data quality:")
		for _, d := range r.DataQuality {
			line("  - %s", d)
		}
	}
	if len(r.Omitted) > 0 {
		line("Omitted: %s.", strings.Join(r.Omitted, "; "))
	}
	return b.String()
}

// setWords is "rank 3" or "ranks 0-2,5" for a formatted rank set.
func setWords(set string) string {
	if strings.ContainsAny(set, ",-") {
		return "ranks " + shortSet(set)
	}
	return "rank " + set
}

// shortSet cuts a long rank set at a range boundary and says how many
// ranks it holds in all (the JSON keeps the whole set).
func shortSet(set string) string { return rankset.Short(set) }
