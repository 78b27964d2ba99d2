package watch

import (
	"fmt"
	"strings"

	"github.com/probing-mcp/probing-mcp/watch/alert"
)

// Alerts hands the watcher's events to the alert sinks: a confirmed stall
// or death is an incident, its end or death a follow-up, a blind watcher
// a dead-man alert; what only the history and the terminal need (a
// capture, a pause) goes out as info, below the default minimum level.
type Alerts struct {
	D *alert.Dispatcher
	// Look is how to look closer, given the verdict's history id (e.g.
	// the query command); nil leaves it out.
	Look func(historyID int64) string
}

// Send converts e and queues it; it returns what was done ("queued", or
// why not).
func (a *Alerts) Send(e Event) string {
	if a == nil || a.D == nil {
		return ""
	}
	h := e.Headline()
	al := alert.Alert{Level: alert.Level(e.Level), Title: e.Title, Text: e.Text, Job: e.Job, Host: e.Host, Time: e.At,
		State: h.State, Category: h.Category, Culprits: h.Culprits, Where: h.Where, Confidence: h.Confidence,
		Evidence: h.Evidence, HistoryID: e.HistoryID, IncidentKey: e.IncidentKey}
	if a.Look != nil && e.HistoryID > 0 {
		al.LookCloser = a.Look(e.HistoryID)
	}
	if h.Threshold != "" {
		al.Text = strings.TrimSpace(al.Text + fmt.Sprintf("\nStall threshold %s", h.Threshold))
		if h.Step != "" {
			al.Text += fmt.Sprintf(" (learned from its step of %s)", h.Step)
		}
	}
	switch e.Kind {
	case KindStalled, KindDead:
		al.Kind = alert.Incident
		if e.FollowUp {
			al.Kind = alert.FollowUp
		}
	case KindMoving:
		if !e.FollowUp {
			return "" // nothing was alerted: nothing to close
		}
		al.Kind, al.Recovered = alert.FollowUp, true
	case KindSlow:
		al.Kind = alert.Incident
		al.IncidentKey = e.Job + "|slow|" + h.Culprits
	case KindBlind:
		al.Kind, al.IncidentKey = alert.DeadMan, alert.DeadManKey(e.Job)
	case KindSeeing:
		al.Kind, al.IncidentKey = alert.Resolved, alert.DeadManKey(e.Job)
	default:
		// captured, paused: info, under their own key, so that they never
		// use up the incident's cooldown.
		al.Kind, al.IncidentKey = alert.Incident, fmt.Sprintf("%s|%s|%d", e.Job, e.Kind, e.Incident)
	}
	if ok, why := a.D.Send(al); !ok {
		return "not sent: " + why
	}
	return "queued"
}
