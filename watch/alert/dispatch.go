package alert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// maxIncidents bounds the incident keys remembered; past it the one
// alerted longest ago is forgotten.
const maxIncidents = 1024

// Dispatcher queues alerts to every sink and delivers them in the
// background. Its methods are safe for concurrent use.
type Dispatcher struct {
	cfg    Config
	log    *slog.Logger
	client *http.Client
	sinks  []*sink
	// secrets are redacted from every alert (Config.Redact, the routing
	// key, the webhooks' tokens).
	secrets []string
	// sleep waits between attempts (tests record the waits instead).
	sleep func(ctx context.Context, d time.Duration) error

	ctx    context.Context // cancelled when Close's deadline passes
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	closed     bool
	incidents  map[string]*incident
	suppressed int64
	belowLevel int64
	refused    int64
}

// incident is an open incident key's memory: when it was last alerted (a
// recovery deletes it).
type incident struct {
	sentAt time.Time
}

// sink is one destination with its own queue and goroutine.
type sink struct {
	index    int    // 1-based among the webhooks; 0 for PagerDuty
	format   format // body format
	url      string // a secret: never logged
	endpoint string // scheme://host, what is logged
	secrets  []string
	q        chan Alert

	sent, failed, retried, dropped atomic.Int64
	lastErr                        atomic.Pointer[string]
}

func (s *sink) name() string {
	if s.format == fmtPagerDuty {
		return "pagerduty"
	}
	return "webhook " + strconv.Itoa(s.index)
}

// Stats counts what happened to the alerts.
type Stats struct {
	// Suppressed: held back by the cooldown (same incident key).
	Suppressed int64
	// BelowLevel: under the minimum level. Refused: unknown kind or level,
	// or sent after Close.
	BelowLevel, Refused int64
	Sinks               []SinkStats
}

// SinkStats is one sink's counts; nothing in it is a secret.
type SinkStats struct {
	Name     string // "webhook 1", "pagerduty"
	Format   string // slack, discord, generic, pagerduty
	Endpoint string // scheme://host
	Queued   int    // waiting now
	// Sent: delivered (2xx). Failed: given up after the attempts, the
	// time budget or a refusal (4xx). Retried: attempts after a first.
	// Dropped: the queue was full, or Close's deadline passed first.
	Sent, Failed, Retried, Dropped int64
	LastError                      string
}

// New starts a dispatcher for cfg (see Config.Validate: a sink that fails
// it is left out and logged). client may be nil; its redirect policy is
// replaced by one that follows only the same scheme and host. logger may
// be nil.
func New(cfg Config, logger *slog.Logger, client *http.Client) *Dispatcher {
	return newDispatcher(cfg, logger, client, sleepCtx)
}

// newDispatcher is New with the wait between attempts given (tests record
// the waits instead of waiting).
func newDispatcher(cfg Config, logger *slog.Logger, client *http.Client, sleep func(context.Context, time.Duration) error) *Dispatcher {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if client == nil {
		client = &http.Client{}
	}
	c := *client
	c.CheckRedirect = sameOrigin
	if cfg.MinLevel != "" && cfg.MinLevel.rank() == 0 {
		logger.Error("alert config: unknown minimum level, using the default", "var", EnvWebhookMinLevel, "default", string(DefaultMinLevel))
		cfg.MinLevel = DefaultMinLevel
	}
	cfg = cfg.withDefaults()
	d := &Dispatcher{cfg: cfg, log: logger, client: &c, sleep: sleep, incidents: map[string]*incident{}}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.secrets = append(d.secrets, cfg.Redact...)
	add := func(s *sink) {
		s.q = make(chan Alert, cfg.QueueSize)
		d.sinks = append(d.sinks, s)
		logger.Info("alert sink", "sink", s.name(), "format", string(s.format), "endpoint", s.endpoint)
	}
	seen := map[string]bool{}
	for i, raw := range cfg.URLs {
		u, err := checkURL(raw)
		if err != nil {
			logger.Error("alert sink left out", "sink", "webhook "+strconv.Itoa(i+1), "err", fmt.Sprintf("%s entry %d: %v", EnvWebhookURL, i+1, err))
			continue
		}
		if seen[raw] {
			continue // the same channel twice would page twice
		}
		seen[raw] = true
		s := &sink{index: i + 1, format: formatOf(u), url: raw, endpoint: endpoint(u), secrets: urlSecrets(u)}
		d.secrets = append(d.secrets, s.secrets...)
		add(s)
	}
	if key := cfg.PagerDutyRoutingKey; key != "" {
		u, err := checkURL(cfg.PagerDutyURL)
		if err != nil {
			logger.Error("alert sink left out", "sink", "pagerduty", "err", fmt.Sprintf("%s: %v", EnvPagerDutyURL, err))
		} else {
			s := &sink{format: fmtPagerDuty, url: cfg.PagerDutyURL, endpoint: endpoint(u), secrets: append(urlSecrets(u), key)}
			d.secrets = append(d.secrets, key)
			add(s)
		}
	}
	for _, s := range d.sinks {
		d.wg.Add(1)
		go d.run(s)
	}
	return d
}

// Send queues a on every sink and returns at once. queued is false, with
// the reason, when it went nowhere: an unknown kind or level, below the
// minimum level, held back by the cooldown (until when), no sink, every
// queue full, or the dispatcher closed. A reason is also given when some
// sinks' queues were full.
//
// One alert per incident: an incident or dead_man alert whose key was
// alerted within the cooldown is held back. A follow_up or resolved alert
// is never held back by the cooldown; it passes the minimum level when its
// incident was alerted (the paged on-call hears the end of it), and
// otherwise is judged by its own level like any alert. A recovery
// (resolved, or a follow_up with Recovered) forgets the key, so the next
// hang of the same culprit alerts at once: the on-call was told it ended.
func (d *Dispatcher) Send(a Alert) (queued bool, reason string) {
	now := d.cfg.Now()
	a, err := normalize(a, now, d.secrets)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.refused++
		return false, err.Error()
	}
	if d.closed {
		d.refused++
		return false, "the alert dispatcher is closed"
	}
	if len(d.sinks) == 0 {
		return false, "no alert sink is configured (set " + EnvWebhookURL + " or " + EnvPagerDutyKey + ")"
	}
	key := a.IncidentKey
	inc := d.incidents[key]
	below := a.Level.rank() < d.cfg.MinLevel.rank()
	switch a.Kind {
	case Incident, DeadMan:
		if below {
			d.belowLevel++
			return false, fmt.Sprintf("level %s is below %s=%s", a.Level, EnvWebhookMinLevel, d.cfg.MinLevel)
		}
		if inc != nil && d.cfg.Cooldown > 0 && now.Before(inc.sentAt.Add(d.cfg.Cooldown)) {
			d.suppressed++
			return false, fmt.Sprintf("suppressed: incident %s was alerted at %s; its cooldown (%s) lasts until %s",
				jobtext.Quote(key, 200), inc.sentAt.UTC().Format(time.RFC3339), d.cfg.Cooldown, inc.sentAt.Add(d.cfg.Cooldown).UTC().Format(time.RFC3339))
		}
	case FollowUp, Resolved:
		if inc == nil && below {
			d.belowLevel++
			return false, fmt.Sprintf("level %s is below %s=%s and no alert was sent for incident %s",
				a.Level, EnvWebhookMinLevel, d.cfg.MinLevel, jobtext.Quote(key, 200))
		}
	}
	var full []string
	for _, s := range d.sinks {
		select {
		case s.q <- a:
		default:
			n := s.dropped.Add(1)
			full = append(full, s.name()+" ("+s.endpoint+")")
			d.log.Warn("alert dropped: the sink's queue is full", "sink", s.name(), "endpoint", s.endpoint,
				"queue", cap(s.q), "dropped", n, "kind", string(a.Kind))
		}
	}
	if len(full) == len(d.sinks) {
		return false, "every sink's queue is full (" + strings.Join(full, ", ") + "): dropped, counted in Stats"
	}
	switch {
	case a.Kind == Resolved || a.Kind == FollowUp && a.Recovered:
		delete(d.incidents, key)
	case a.Kind == Incident || a.Kind == DeadMan || inc == nil:
		d.remember(key, now)
	}
	if len(full) > 0 {
		return true, "queued, but dropped at " + strings.Join(full, ", ") + ": queue full"
	}
	return true, ""
}

// remember records key as alerted at now, forgetting the oldest key when
// there are too many.
func (d *Dispatcher) remember(key string, now time.Time) {
	if _, ok := d.incidents[key]; !ok && len(d.incidents) >= maxIncidents {
		var oldest string
		var at time.Time
		for k, v := range d.incidents {
			if oldest == "" || v.sentAt.Before(at) {
				oldest, at = k, v.sentAt
			}
		}
		delete(d.incidents, oldest)
	}
	d.incidents[key] = &incident{sentAt: now}
}

// Close stops taking alerts and delivers what is queued within ctx. When
// ctx ends first, the attempts in flight are cancelled, what is left is
// counted dropped, and the error says how many were not delivered.
func (d *Dispatcher) Close(ctx context.Context) error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		for _, s := range d.sinks {
			close(s.q)
		}
	}
	d.mu.Unlock()
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	left := 0
	for _, s := range d.sinks {
		left += len(s.q)
	}
	d.cancel()
	return fmt.Errorf("alert: closing: the deadline passed with %d alert(s) queued and the attempts in flight cancelled: %w", left, ctx.Err())
}

// Stats returns the counts so far.
func (d *Dispatcher) Stats() Stats {
	d.mu.Lock()
	st := Stats{Suppressed: d.suppressed, BelowLevel: d.belowLevel, Refused: d.refused}
	d.mu.Unlock()
	for _, s := range d.sinks {
		ss := SinkStats{Name: s.name(), Format: string(s.format), Endpoint: s.endpoint, Queued: len(s.q),
			Sent: s.sent.Load(), Failed: s.failed.Load(), Retried: s.retried.Load(), Dropped: s.dropped.Load()}
		if e := s.lastErr.Load(); e != nil {
			ss.LastError = *e
		}
		st.Sinks = append(st.Sinks, ss)
	}
	return st
}

// run delivers s's alerts in order until its queue is closed.
func (d *Dispatcher) run(s *sink) {
	defer d.wg.Done()
	lost := 0
	for a := range s.q {
		if d.ctx.Err() != nil {
			s.dropped.Add(1)
			lost++
			continue
		}
		d.deliver(s, a)
	}
	if lost > 0 {
		d.log.Warn("alerts not delivered: the dispatcher closed first", "sink", s.name(), "endpoint", s.endpoint, "alerts", lost)
	}
}

// outcome is one attempt's result.
type outcome struct {
	ok, retry  bool
	retryAfter time.Duration // the receiver's Retry-After, 0 when none
	status     int
	msg        string // why it failed, with no secret in it
}

// deliver makes the attempts for one alert on one sink.
func (d *Dispatcher) deliver(s *sink, a Alert) {
	body, err := s.build(a, d.cfg.PagerDutyRoutingKey)
	if err != nil {
		d.fail(s, a, 0, "building the body: "+err.Error())
		return
	}
	start := time.Now()
	for attempt := 1; ; attempt++ {
		o := d.attempt(s, body)
		if o.ok {
			s.sent.Add(1)
			if attempt > 1 {
				d.log.Info("alert delivered after retries", "sink", s.name(), "endpoint", s.endpoint, "attempts", attempt)
			}
			return
		}
		if d.ctx.Err() != nil {
			s.dropped.Add(1)
			d.setErr(s, o.msg)
			d.log.Warn("alert not delivered: the dispatcher closed first", "sink", s.name(), "endpoint", s.endpoint, "attempts", attempt, "err", o.msg)
			return
		}
		if !o.retry {
			d.fail(s, a, attempt, o.msg)
			return
		}
		if attempt >= d.cfg.MaxAttempts {
			d.fail(s, a, attempt, o.msg+" (after "+strconv.Itoa(attempt)+" attempts)")
			return
		}
		wait := backoff(attempt)
		if o.retryAfter > 0 {
			wait = min(o.retryAfter, maxRetryAfter)
		}
		if time.Since(start)+wait > d.cfg.MaxElapsed {
			d.fail(s, a, attempt, fmt.Sprintf("%s; the next try in %s would pass the alert's %s budget", o.msg, wait.Round(time.Millisecond), d.cfg.MaxElapsed))
			return
		}
		s.retried.Add(1)
		d.log.Debug("alert attempt failed, retrying", "sink", s.name(), "endpoint", s.endpoint, "attempt", attempt, "wait", wait, "err", o.msg)
		if d.sleep(d.ctx, wait) != nil {
			s.dropped.Add(1)
			d.setErr(s, o.msg)
			d.log.Warn("alert not delivered: the dispatcher closed first", "sink", s.name(), "endpoint", s.endpoint, "attempts", attempt, "err", o.msg)
			return
		}
	}
}

func (d *Dispatcher) fail(s *sink, a Alert, attempts int, msg string) {
	s.failed.Add(1)
	d.setErr(s, msg)
	d.log.Warn("alert not delivered", "sink", s.name(), "endpoint", s.endpoint, "format", string(s.format),
		"kind", string(a.Kind), "attempts", attempts, "err", msg)
}

func (d *Dispatcher) setErr(s *sink, msg string) { s.lastErr.Store(&msg) }

func (s *sink) build(a Alert, routingKey string) ([]byte, error) {
	switch s.format {
	case fmtSlack:
		return buildSlack(a)
	case fmtDiscord:
		return buildDiscord(a)
	case fmtPagerDuty:
		return buildPagerDuty(a, routingKey)
	}
	return buildGeneric(a)
}

// attempt posts body once, within the timeout.
func (d *Dispatcher) attempt(s *sink, body []byte) outcome {
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return outcome{msg: s.scrub("making the request: " + unwrapURL(err).Error())}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "probing-mcp-alert")
	resp, err := d.client.Do(req)
	if err != nil {
		msg := unwrapURL(err).Error()
		if ctx.Err() == context.DeadlineExceeded && d.ctx.Err() == nil {
			msg = "no answer within " + d.cfg.Timeout.String() + ": " + msg
		}
		return outcome{retry: true, msg: s.scrub(msg)}
	}
	defer func() {
		// Drain a little so the connection can be reused; never the whole.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}()
	o := outcome{status: resp.StatusCode}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		o.ok = true
		return o
	}
	snip, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	o.msg = "HTTP " + strconv.Itoa(resp.StatusCode)
	if t := strings.TrimSpace(string(snip)); t != "" {
		// The receiver's words are not trusted: escaped, clipped.
		o.msg += ": " + jobtext.Escape(t, 200)
	}
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		o.msg = fmt.Sprintf("HTTP %d: a redirect to %s was not followed: an alert's body and URL go only to the scheme and host configured; set the URL it redirects to",
			resp.StatusCode, redirectHost(resp))
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode >= 500:
		o.retry = true
		o.retryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	o.msg = s.scrub(o.msg)
	return o
}

// scrub takes out of msg anything of the sink's secrets (the URL's path
// and query, the routing key), in case a library quoted them.
func (s *sink) scrub(msg string) string {
	msg = strings.ReplaceAll(msg, s.url, s.endpoint+"/…")
	return redact(msg, s.secrets)
}

// unwrapURL drops *url.Error's wrapping, which quotes the whole URL.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redirectHost is the scheme://host a redirect pointed to, for the log.
func redirectHost(resp *http.Response) string {
	loc, err := resp.Location()
	if err != nil {
		return "an unreadable location"
	}
	return endpoint(loc)
}

// sameOrigin follows a redirect only to the first request's scheme and
// host (a webhook's token and the body must not travel elsewhere), at
// most 3 times; otherwise the redirect itself is the answer.
func sameOrigin(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	if len(via) > 3 || !strings.EqualFold(req.URL.Scheme, first.Scheme) || !strings.EqualFold(req.URL.Host, first.Host) {
		return http.ErrUseLastResponse
	}
	return nil
}

// retryAfter reads Retry-After: seconds or an HTTP date; 0 when absent or
// unreadable. The caller bounds it.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n <= 0 || n > 86400 {
			return 0
		}
		return time.Duration(n * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// backoff is the wait after the attempt-th failure: 1 s doubling to 30 s,
// jittered over its upper half so retries from many watchers spread out.
func backoff(attempt int) time.Duration {
	d := backoffCap
	if attempt < 6 {
		d = min(backoffBase<<(attempt-1), backoffCap)
	}
	return d/2 + rand.N(d/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
