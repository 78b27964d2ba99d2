package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/storage/history"
)

// ListAlertsParams are the arguments of list_alerts.
type ListAlertsParams struct {
	Since    string `json:"since,omitempty" jsonschema_description:"Newer than: 30m, 6h or an RFC 3339 time"`
	Limit    int    `json:"limit,omitempty" jsonschema:"minimum=0,maximum=200" jsonschema_description:"Rows (default 20)"`
	BeforeID int64  `json:"before_id,omitempty" jsonschema:"minimum=0" jsonschema_description:"Page: last id seen"`
}

// AlertView is one of the watcher's events.
type AlertView struct {
	ID          int64     `json:"id"`
	At          time.Time `json:"at"`
	Kind        string    `json:"kind"`
	Level       string    `json:"level"`
	Title       string    `json:"title"`
	Incident    int64     `json:"incident,omitempty"`
	Culprits    string    `json:"culprits,omitempty"`
	Category    string    `json:"category,omitempty"`
	Where       string    `json:"where,omitempty"`
	Confidence  string    `json:"confidence,omitempty"`
	DiagnosisID int64     `json:"diagnosis_id,omitempty"`
	Delivery    string    `json:"delivery,omitempty"`
}

// ListAlertsResult is a page of the watcher's events, newest first.
type ListAlertsResult struct {
	Summary string      `json:"summary"`
	Alerts  []AlertView `json:"alerts"`
	// NextBeforeID pages on (before_id); absent on the last page.
	NextBeforeID *int64 `json:"next_before_id,omitempty"`
}

func listAlerts(env *Env) Def {
	tool := mcplib.NewTool("list_alerts",
		mcplib.WithToolTitle("Watcher's alerts"),
		mcplib.WithDescription("Use to see when the job stalled, died or slowed while nobody asked, and whom the watcher blamed."),
		schemas[ListAlertsParams, ListAlertsResult](env),
		hints(true, false, true, false),
	)
	h, call := typed(func(ctx context.Context, p ListAlertsParams) (ListAlertsResult, error) {
		return ListAlerts(ctx, env, p, time.Now())
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "the watcher's events (stalls captured and confirmed, deaths, stragglers, a blind watcher), newest first",
		Doc:     "The events `probing-mcp watch` kept in the history (`history.alerts`), newest first: each stall or death as captured (its evidence kept, `diagnosis_id`) and as confirmed (the alert), pauses, the job moving again, stragglers, and a watcher that could not see the job, with the verdict's culprit, category, line and confidence and what the alert sinks did. `since` (a duration back or a time) and `before_id` page."}
}

// ListAlerts answers list_alerts.
func ListAlerts(_ context.Context, env *Env, p ListAlertsParams, now time.Time) (ListAlertsResult, error) {
	if p.Limit == 0 {
		p.Limit = 20
	}
	var since time.Time
	if s := strings.TrimSpace(p.Since); s != "" {
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
			since = now.Add(-d)
		} else if t, err := time.Parse(time.RFC3339, s); err == nil {
			since = t
		} else {
			return ListAlertsResult{}, userErrorf("since %q is neither a duration back (30m, 6h) nor an RFC 3339 time (2026-12-06T20:00:00Z)", jobtext.Clip(s, 40))
		}
	}
	res := ListAlertsResult{Alerts: []AlertView{}}
	if env.History == nil {
		res.Summary = "No history: this server keeps none (PROBING_MCP_HISTORY is off, or its file could not be opened), so no watcher's event can be listed; that is not evidence that nothing happened."
		return res, nil
	}
	rows, err := env.History.Alerts(history.ListOptions{Limit: p.Limit + 1, BeforeID: p.BeforeID}, since)
	if err != nil {
		return ListAlertsResult{}, fmt.Errorf("reading history.alerts: %w", err)
	}
	if len(rows) > p.Limit {
		rows = rows[:p.Limit]
		next := rows[len(rows)-1].ID
		res.NextBeforeID = &next
	}
	for _, r := range rows {
		res.Alerts = append(res.Alerts, AlertView{ID: r.ID, At: r.At, Kind: r.Kind, Level: r.Level, Title: r.Title, Incident: r.Incident,
			Culprits: r.CulpritRanks, Category: r.Category, Where: r.Location, Confidence: r.Confidence, DiagnosisID: r.DiagnosisID,
			Delivery: r.Delivery})
	}
	switch {
	case len(rows) == 0 && p.BeforeID == 0:
		res.Summary = "No watcher event kept" + sinceWords(since) + ". Either no watcher ran (probing-mcp watch), or it saw the job move; diagnose_hang says where the job is now."
	case len(rows) == 0:
		res.Summary = "No more events."
	default:
		res.Summary = fmt.Sprintf("%d event(s)%s, newest first; the newest: %s.", len(rows), sinceWords(since), alertWords(res.Alerts[0]))
	}
	return res, nil
}

func sinceWords(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return " since " + t.UTC().Format(time.RFC3339)
}

func alertWords(a AlertView) string {
	s := fmt.Sprintf("%s %s (%s)", a.At.UTC().Format(time.RFC3339), jobtext.Quote(a.Title, jobtext.Line), a.Kind)
	if a.Culprits != "" {
		s += fmt.Sprintf(": rank %s, %s, %s confidence", a.Culprits, a.Category, a.Confidence)
		if a.Where != "" {
			s += " at " + jobtext.Quote(a.Where, jobtext.Line)
		}
	}
	return s
}

// ModelText is the summary, then one line per event.
func (r ListAlertsResult) ModelText() string {
	lines := []string{r.Summary}
	for _, a := range r.Alerts {
		l := fmt.Sprintf("  #%d %s", a.ID, alertWords(a))
		if a.DiagnosisID > 0 {
			l += fmt.Sprintf(" [verdict: history.diagnoses id %d]", a.DiagnosisID)
		}
		if a.Delivery != "" {
			l += " [sent: " + jobtext.Quote(a.Delivery, jobtext.Line) + "]"
		}
		lines = append(lines, l)
	}
	if r.NextBeforeID != nil {
		lines = append(lines, fmt.Sprintf("More: call again with before_id %d.", *r.NextBeforeID))
	}
	return boundLines(lines, 8000)
}

// AlertsURI is the resource of the watcher's newest events; a client
// that subscribes to it is told when the watcher in this server adds one.
const AlertsURI = "probing://alerts"

// AlertsResource serves list_alerts' first page as a resource.
func AlertsResource(env *Env) server.ServerResource {
	r := mcplib.NewResource(AlertsURI, "alerts",
		mcplib.WithResourceDescription("The watcher's newest events (stalls captured and confirmed, deaths, stragglers); subscribe to hear of new ones"),
		mcplib.WithMIMEType("application/json"))
	return server.ServerResource{Resource: r, Handler: func(ctx context.Context, req mcplib.ReadResourceRequest) ([]mcplib.ResourceContents, error) {
		res, err := ListAlerts(ctx, env, ListAlertsParams{}, time.Now())
		if err != nil {
			return nil, err
		}
		return jsonContents(req.Params.URI, res)
	}}
}
