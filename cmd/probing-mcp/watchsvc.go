package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/envswitch"
	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/watch"
	"github.com/probing-mcp/probing-mcp/watch/alert"
)

// envWatch turns the watcher on inside serve and node.
const envWatch = "PROBING_WATCH"

// inProcessWatcher is the configuration read at start: a bad switch or
// alert setting stops the command, as `probing-mcp watch` does.
type inProcessWatcher struct {
	on     bool
	alerts alert.Config
}

func watcherFromEnv(getenv func(string) string) (inProcessWatcher, error) {
	on, err := envswitch.Parse(envWatch, getenv(envWatch))
	if err != nil || !on {
		return inProcessWatcher{}, err
	}
	acfg, err := alert.ConfigFromEnv(getenv)
	if err != nil {
		return inProcessWatcher{}, err
	}
	return inProcessWatcher{on: true, alerts: acfg}, nil
}

// start runs the watcher over scope until ctx ends, its events logged,
// kept in hist and alerted; onEvent (serve's resource notification) sees
// each too. The returned function waits for it and drains the alerts.
func (w inProcessWatcher) start(ctx context.Context, scope evidence.Scope, hist *history.Store, host string, logger *slog.Logger, onEvent func(watch.Event)) (func(), error) {
	if !w.on {
		return func() {}, nil
	}
	sender, drain := alertSender(w.alerts, logger)
	if onEvent == nil {
		onEvent = func(watch.Event) {}
	}
	wt, err := watch.New(watch.Options{Scope: scope, History: hist, Job: jobName(), Host: host, Logger: logger,
		Alerts: sender, Notify: onEvent})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wt.Run(ctx)
	}()
	logger.Info("watching the job", "alerts", w.alerts.Enabled(), "history", hist != nil)
	return func() {
		<-done
		drain()
	}, nil
}

// alertSender is the watcher's alert sinks (nil when none are set) and
// the function that gives queued alerts a little time at exit, never
// forever.
func alertSender(acfg alert.Config, logger *slog.Logger) (*watch.Alerts, func()) {
	if !acfg.Enabled() {
		return nil, func() {}
	}
	d := alert.New(acfg, logger, nil)
	return &watch.Alerts{D: d, Look: func(id int64) string {
			return fmt.Sprintf("probing-mcp query \"SELECT report_json FROM history.diagnoses WHERE id = %d\"", id)
		}}, func() {
			cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := d.Close(cctx); err != nil {
				logger.Warn("watch: alerts not delivered at exit", "err", err)
			}
		}
}

// openHistory opens the history for a watcher, or says why not (watching
// is worth more than keeping).
func openHistory(path string, logger *slog.Logger) *history.Store {
	if path == "" {
		return nil
	}
	h, err := history.Open(path, history.Options{})
	if err != nil {
		logger.Warn("history unavailable; captures will not be kept", "path", path, "err", err)
		return nil
	}
	return h
}
