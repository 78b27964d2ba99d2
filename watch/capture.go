package watch

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/history"
)

// capture gathers the whole evidence (every rank's stacks with the
// GIL-free fallback, the Flight Recorder through the agents, the GPUs),
// keeps the stacks and the verdict in the history, and diagnoses it.
func (w *Watcher) capture(ctx context.Context, in *incident, js diagnosis.JobState) {
	ctx, cancel := context.WithTimeout(ctx, w.opt.CaptureTimeout)
	defer cancel()
	in.capturedN++
	in.lastDiag = w.opt.Now()
	rep, err := diagnosis.Run(ctx, diagnosis.RunOptions{Scope: w.opt.Scope, State: w.opt.State,
		Gathered: func(b *evidence.Bundle) { w.keepStacks(b) }})
	if err != nil {
		w.opt.Logger.Warn("watch: capture refused", "err", err)
		return
	}
	in.report = &rep
	if w.opt.History == nil {
		return
	}
	inputs, _ := json.Marshal(map[string]any{"watch": true, "job": w.opt.Job, "host": w.opt.Host, "incident": in.id,
		"pulse_state": js.State, "threshold_ms": js.Threshold.Milliseconds(), "step_ms": js.Step.Milliseconds()})
	body, err := json.Marshal(rep)
	if err != nil {
		return
	}
	culprits := ""
	if len(rep.Hypotheses) > 0 {
		culprits = rep.Hypotheses[0].Culprits
	}
	id, err := w.opt.History.AddDiagnosis(history.Diagnosis{Kind: "watch", Inputs: inputs, Verdict: rep.Summary,
		CulpritRanks: culprits, Report: body})
	if err != nil {
		w.opt.Logger.Warn("watch: verdict not kept in history", "err", err)
		return
	}
	in.historyID = id
}

// record keeps the event in history.alerts (listed by list_alerts and
// SQL, whatever the sinks did).
func (w *Watcher) record(e Event, delivery string) {
	if w.opt.History == nil {
		return
	}
	h := e.Headline()
	head, _ := json.Marshal(h)
	if _, err := w.opt.History.AddAlert(history.Alert{At: e.At, Kind: string(e.Kind), Level: string(e.Level), Title: e.Title,
		Text: e.Text, Job: e.Job, Host: e.Host, Incident: int64(e.Incident), State: h.State, Category: h.Category,
		CulpritRanks: h.Culprits, Location: h.Where, Confidence: h.Confidence, DiagnosisID: e.HistoryID,
		Delivery: delivery, Headline: head}); err != nil {
		w.opt.Logger.Warn("watch: event not kept in history", "err", err)
	}
}

// keepStacks stores every rank's captured threads in history.stack_captures
// (a rank the watchdog kills later is diagnosed post-mortem from them),
// and the Flight Recorder dumps the capture read in history.fr_snapshots.
func (w *Watcher) keepStacks(b *evidence.Bundle) {
	if w.opt.History == nil || b == nil {
		return
	}
	for _, d := range b.FRDumps {
		if _, err := w.opt.History.AddSnapshot(evidence.SnapshotRow(d, "watch")); err != nil {
			w.opt.Logger.Warn("watch: Flight Recorder snapshot not kept in history", "rank", d.Rank, "err", err)
		}
	}
	ranks := make([]int, 0, len(b.Ranks))
	for r := range b.Ranks {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	for _, r := range ranks {
		e := b.Ranks[r]
		if e == nil || !e.Alive || len(e.Threads) == 0 {
			continue
		}
		host := w.opt.Host
		if e.Node != "" {
			host = e.Node
		}
		p := stacks.Process{PID: e.PID, Rank: r, Host: host, Source: e.StackSource, CapturedAt: w.opt.Now(), Threads: e.Threads}
		data, err := json.Marshal(p)
		if err != nil {
			continue
		}
		method := e.StackSource
		if method == "probing" || method == "" {
			method = "agent"
		}
		rank := r
		if _, err := w.opt.History.AddStackCapture(history.StackCapture{Host: host, PID: e.PID, Rank: &rank, Method: method,
			ThreadCount: len(e.Threads), Stacks: data}); err != nil {
			w.opt.Logger.Warn("watch: stacks not kept in history", "rank", r, "err", err)
			return
		}
	}
}
