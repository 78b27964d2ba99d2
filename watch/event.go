package watch

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Kind is what an event says.
type Kind string

// Event kinds. Captured comes first in an incident (the evidence is safe);
// Stalled or Dead confirm it (the alert); Paused holds it; Moving closes it.
const (
	KindCaptured Kind = "captured"
	KindStalled  Kind = "stalled"
	KindDead     Kind = "dead"
	KindPaused   Kind = "paused"
	KindMoving   Kind = "moving"
	KindSlow     Kind = "slow"
	KindGPUFault Kind = "gpu_fault"
	KindBlind    Kind = "blind"
	KindSeeing   Kind = "seeing"
)

// Level is an event's severity, as alert sinks take it.
type Level string

// Levels.
const (
	LevelInfo  Level = "info"
	LevelWarn  Level = "warn"
	LevelError Level = "error"
)

// Event is one thing the watcher noticed.
type Event struct {
	Kind  Kind      `json:"kind"`
	Level Level     `json:"level"`
	At    time.Time `json:"at"`
	Title string    `json:"title"`
	Text  string    `json:"text"`
	Job   string    `json:"job,omitempty"`
	Host  string    `json:"host,omitempty"`
	// Incident numbers the stall or death the event belongs to (0: none).
	Incident int `json:"incident,omitempty"`
	// State is the pulse's reading: the learned threshold, the step.
	State diagnosis.JobState `json:"-"`
	// Report is the diagnosis of the captured evidence.
	Report *diagnosis.Report `json:"-"`
	// HistoryID is the verdict's row in history.diagnoses (0: not kept).
	HistoryID int64 `json:"history_id,omitempty"`
	// StalledFor is how long the job had made no progress.
	StalledFor time.Duration `json:"-"`
	// FollowUp: news about an incident already confirmed (it died, or it
	// moves again), not a new one.
	FollowUp bool `json:"follow_up,omitempty"`
	// IncidentKey groups a confirmed incident's events for the alert
	// sinks; "" for the others.
	IncidentKey string `json:"incident_key,omitempty"`
}

// Headline is the verdict's first hypothesis, as alerts carry it.
type Headline struct {
	State      string `json:"state"`
	Category   string `json:"category,omitempty"`
	Culprits   string `json:"culprits,omitempty"`
	Where      string `json:"where,omitempty"`
	Confidence string `json:"confidence,omitempty"`
	// Evidence are its strongest lines (at most three).
	Evidence []string `json:"evidence,omitempty"`
	// Threshold is the stall threshold the watcher used, and Step the
	// job's typical step it was learned from (0: no step history).
	Threshold string `json:"threshold,omitempty"`
	Step      string `json:"step,omitempty"`
	// StalledFor: how long the job had made no progress.
	StalledFor string `json:"stalled_for,omitempty"`
}

// Headline sums the event's verdict up.
func (e Event) Headline() Headline {
	h := Headline{State: e.State.State}
	if e.State.Threshold > 0 {
		h.Threshold = e.State.Threshold.Round(time.Millisecond).String()
	}
	if e.State.Step > 0 {
		h.Step = e.State.Step.Round(time.Millisecond).String()
	}
	if e.StalledFor > 0 {
		h.StalledFor = e.StalledFor.Round(time.Second).String()
	}
	if e.Report == nil && len(e.State.Slow) > 0 {
		h.Culprits, h.Category = rankset.Format(e.State.Slow), diagnosis.CatStraggler
	}
	if r := e.Report; r != nil {
		h.State = r.State
		if len(r.Hypotheses) > 0 {
			top := r.Hypotheses[0]
			h.Category, h.Culprits, h.Confidence = top.Category, top.Culprits, top.Confidence
			if top.Where != nil {
				h.Where = top.Where.String()
			}
			for _, ev := range top.Evidence {
				if len(h.Evidence) == 3 {
					break
				}
				h.Evidence = append(h.Evidence, jobtext.CutLine(ev.Text, 300))
			}
		}
	}
	return h
}

// MarshalJSON writes the event with its headline (one JSON line per
// event is what `probing-mcp watch --json` prints).
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	return json.Marshal(struct {
		plain
		Headline Headline `json:"headline"`
	}{plain(e), e.Headline()})
}

// Line is the event as one or a few lines of text for a terminal or log.
func (e Event) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%s] %s", e.At.Format(time.RFC3339), strings.ToUpper(string(e.Level)), e.Title)
	h := e.Headline()
	if h.Culprits != "" {
		fmt.Fprintf(&b, ": rank %s (%s, %s confidence)", h.Culprits, h.Category, h.Confidence)
		if h.Where != "" {
			fmt.Fprintf(&b, " at %s", h.Where)
		}
	}
	if e.Text != "" {
		fmt.Fprintf(&b, "\n  %s", jobtext.CutLine(e.Text, 600))
	}
	if h.Threshold != "" {
		fmt.Fprintf(&b, "\n  stall threshold %s", h.Threshold)
		if h.Step != "" {
			fmt.Fprintf(&b, " (learned from its step of %s)", h.Step)
		}
	}
	if e.HistoryID > 0 {
		fmt.Fprintf(&b, "\n  look closer: probing-mcp query \"SELECT report_json FROM history.diagnoses WHERE id = %d\"", e.HistoryID)
	}
	return b.String()
}

// title is the alert's title for a confirmed verdict: under 64 characters.
func title(rep *diagnosis.Report) string {
	t := "job " + rep.State
	if len(rep.Hypotheses) > 0 && rep.Hypotheses[0].Culprits != "" {
		h := rep.Hypotheses[0]
		t = fmt.Sprintf("job %s: rank %s, %s", rep.State, h.Culprits, h.Category)
	}
	return jobtext.CutLine(t, 63)
}
