package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// request is what a receiver got.
type request struct {
	path, contentType string
	body              []byte
}

// receiver is a real HTTP server on loopback that records every request
// and answers as handle says (n counts requests from 1).
type receiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []request
	got  chan request
}

func newReceiver(t *testing.T, tls bool, handle func(w http.ResponseWriter, r *http.Request, n int)) *receiver {
	t.Helper()
	rc := &receiver{got: make(chan request, 1024)}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := request{path: r.URL.Path, contentType: r.Header.Get("Content-Type"), body: b}
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, req)
		n := len(rc.reqs)
		rc.mu.Unlock()
		rc.got <- req
		if handle != nil {
			handle(w, r, n)
		}
	})
	if tls {
		rc.srv = httptest.NewTLSServer(h)
	} else {
		rc.srv = httptest.NewServer(h)
	}
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]request(nil), rc.reqs...)
}

// clientTo is an HTTPS client that reaches srv whatever host a URL names
// (hooks.slack.com, discord.com), so the format is chosen from the real
// hosts while the bytes go to the test's server.
func clientTo(srv *httptest.Server) *http.Client {
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.ServerName = "example.com" // in httptest's certificate
	addr := srv.Listener.Addr().String()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	return &http.Client{Transport: tr}
}

// logBuf is a log that tests read.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waits records the waits between attempts instead of waiting.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.d = append(w.d, d)
	w.mu.Unlock()
	return ctx.Err()
}

func (w *waits) all() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.d...)
}

type harness struct {
	d     *Dispatcher
	log   *logBuf
	waits *waits
}

func start(t *testing.T, cfg Config, client *http.Client) *harness {
	t.Helper()
	h := &harness{log: &logBuf{}, waits: &waits{}}
	logger := slog.New(slog.NewTextHandler(h.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.d = newDispatcher(cfg, logger, client, h.waits.sleep)
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = h.d.Close(ctx)
		h.d.wg.Wait()
	})
	return h
}

// drain closes the dispatcher and waits for every delivery, within the
// test's deadline.
func (h *harness) drain(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if dl, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-5*time.Second))
		defer cancel()
	}
	if err := h.d.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) sink(t *testing.T, i int) SinkStats {
	t.Helper()
	st := h.d.Stats()
	if i >= len(st.Sinks) {
		t.Fatalf("no sink %d: %+v", i, st)
	}
	return st.Sinks[i]
}

func send(t *testing.T, d *Dispatcher, a Alert) {
	t.Helper()
	if ok, why := d.Send(a); !ok || why != "" {
		t.Fatalf("Send(%q): %v %q", a.Title, ok, why)
	}
}

// TestDeliversEveryFormat: one incident reaches Slack, Discord, a generic
// receiver and PagerDuty, each in its format, over HTTPS; no secret of a
// sink is in another's body or in the log.
func TestDeliversEveryFormat(t *testing.T) {
	const (
		slackToken   = "SLACKTOKEN0123456789abcd"
		discordToken = "DISCORDTOKEN0123456789abcdefgh"
		genericToken = "GENERICTOKEN0123456789"
		routingKey   = "R0UT1NGKEY0123456789abcdefABCDEF"
	)
	rc := newReceiver(t, true, func(w http.ResponseWriter, r *http.Request, n int) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/api/webhooks/"):
			w.WriteHeader(http.StatusNoContent) // Discord
		case r.URL.Path == "/v2/enqueue":
			w.WriteHeader(http.StatusAccepted) // PagerDuty
		default:
			io.WriteString(w, "ok")
		}
	})
	h := start(t, Config{
		URLs: []string{
			"https://hooks.slack.com/services/T0/B0/" + slackToken,
			"https://discord.com/api/webhooks/123/" + discordToken,
			"https://alerts.example/hook?token=" + genericToken,
		},
		PagerDutyRoutingKey: routingKey,
		Redact:              []string{"the-job-token-0123"},
	}, clientTo(rc.srv))
	a := verdict()
	a.Evidence = append([]string{"--token the-job-token-0123"}, a.Evidence...)
	send(t, h.d, a)
	h.drain(t)

	byPath := map[string]request{}
	for _, r := range rc.requests() {
		byPath[r.path] = r
		if r.contentType != "application/json" {
			t.Errorf("%s: Content-Type %q", r.path, r.contentType)
		}
		for _, secret := range []string{slackToken, discordToken, genericToken, "the-job-token-0123"} {
			if bytes.Contains(r.body, []byte(secret)) {
				t.Errorf("%s: the body holds a secret (%s)", r.path, secret)
			}
		}
		if r.path != "/v2/enqueue" && bytes.Contains(r.body, []byte(routingKey)) {
			t.Errorf("%s: the body holds the routing key", r.path)
		}
	}
	if len(byPath) != 4 {
		t.Fatalf("requests to %v, want 4 sinks", byPath)
	}
	slack := decode(t, byPath["/services/T0/B0/"+slackToken].body)
	if str(t, slack, "blocks", 0, "type") != "header" {
		t.Errorf("Slack body %v", slack)
	}
	discord := decode(t, byPath["/api/webhooks/123/"+discordToken].body)
	if get(t, discord, "embeds", 0, "color").(float64) != 15158332 {
		t.Errorf("Discord body %v", discord)
	}
	pd := decode(t, byPath["/v2/enqueue"].body)
	if str(t, pd, "routing_key") != routingKey || str(t, pd, "payload", "source") != "node-07" {
		t.Errorf("PagerDuty body %v", pd)
	}
	generic := decode(t, byPath["/hook"].body)
	if str(t, generic, "culprits") != "1,4-7" || str(t, generic, "project") != "llama-70b" {
		t.Errorf("generic body %v", generic)
	}
	if ev := get(t, generic, "evidence", 0); ev != "--token "+Redacted {
		t.Errorf("the job's token not redacted: %v", ev)
	}
	st := h.d.Stats()
	for i, s := range st.Sinks {
		if s.Sent != 1 || s.Failed+s.Dropped+s.Retried != 0 {
			t.Errorf("sink %d: %+v", i, s)
		}
	}
	if st.Sinks[0].Format != "slack" || st.Sinks[1].Format != "discord" || st.Sinks[2].Format != "generic" || st.Sinks[3].Format != "pagerduty" {
		t.Errorf("formats %+v", st.Sinks)
	}
	log := h.log.String()
	for _, secret := range []string{slackToken, discordToken, genericToken, routingKey, "/services/", "token="} {
		if strings.Contains(log, secret) {
			t.Errorf("the log holds %q:\n%s", secret, log)
		}
	}
	if !strings.Contains(log, "endpoint=https://hooks.slack.com") {
		t.Errorf("the log does not name the Slack sink's endpoint:\n%s", log)
	}
}

// TestRetryOn500 retries a 500 with backoff and loses nothing: the body
// arrives whole on the third try.
func TestRetryOn500(t *testing.T) {
	rc := newReceiver(t, false, func(w http.ResponseWriter, r *http.Request, n int) {
		if n <= 2 {
			http.Error(w, "busy", http.StatusInternalServerError)
		}
	})
	h := start(t, Config{URLs: []string{rc.srv.URL + "/hook"}}, nil)
	send(t, h.d, verdict())
	h.drain(t)
	reqs := rc.requests()
	if len(reqs) != 3 || !bytes.Equal(reqs[0].body, reqs[2].body) {
		t.Fatalf("requests %d", len(reqs))
	}
	if s := h.sink(t, 0); s.Sent != 1 || s.Retried != 2 || s.Failed != 0 {
		t.Errorf("stats %+v", s)
	}
	w := h.waits.all()
	if len(w) != 2 || w[0] < 500*time.Millisecond || w[0] > time.Second || w[1] < time.Second || w[1] > 2*time.Second {
		t.Errorf("backoff waits %v, want about 1 s then 2 s (jittered over the upper half)", w)
	}
}

// TestRetryAfter honours 429's Retry-After, bounded, and gives up when
// the wait would pass the alert's time budget.
func TestRetryAfter(t *testing.T) {
	date := func() string { return time.Now().Add(20 * time.Second).UTC().Format(http.TimeFormat) }
	for _, c := range []struct {
		name       string
		header     func() string
		maxElapsed time.Duration
		wait       time.Duration
		sent       bool
	}{
		{"seconds", func() string { return "7" }, 0, 7 * time.Second, true},
		{"bounded", func() string { return "3600" }, 0, maxRetryAfter, true},
		{"date", date, 0, 20 * time.Second, true},
		{"past the budget", func() string { return "45" }, 30 * time.Second, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := newReceiver(t, false, func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 1 {
					w.Header().Set("Retry-After", c.header())
					w.WriteHeader(http.StatusTooManyRequests)
				}
			})
			h := start(t, Config{URLs: []string{rc.srv.URL}, MaxElapsed: c.maxElapsed}, nil)
			send(t, h.d, verdict())
			h.drain(t)
			s := h.sink(t, 0)
			if !c.sent {
				if s.Failed != 1 || !strings.Contains(s.LastError, "budget") || len(h.waits.all()) != 0 {
					t.Errorf("stats %+v, waits %v", s, h.waits.all())
				}
				return
			}
			w := h.waits.all()
			// An HTTP date has whole seconds: up to one less than asked.
			if s.Sent != 1 || len(w) != 1 || w[0] > c.wait || w[0] <= c.wait/2 {
				t.Errorf("stats %+v, waits %v, want one of about %s", s, w, c.wait)
			}
		})
	}
}

// TestNotRetried: a 4xx other than 408 and 429 is the receiver refusing
// the alert; trying again would not help.
func TestNotRetried(t *testing.T) {
	rc := newReceiver(t, false, func(w http.ResponseWriter, r *http.Request, n int) {
		switch n {
		case 1:
			http.Error(w, "invalid_payload", http.StatusBadRequest)
		case 2:
			w.WriteHeader(http.StatusRequestTimeout)
		}
	})
	h := start(t, Config{URLs: []string{rc.srv.URL}}, nil)
	send(t, h.d, Alert{Title: "a", Job: "1"})
	send(t, h.d, Alert{Title: "b", Job: "2"})
	h.drain(t)
	if s := h.sink(t, 0); s.Failed != 1 || s.Sent != 1 || s.Retried != 1 || !strings.Contains(s.LastError, "HTTP 400: invalid_payload") {
		t.Errorf("stats %+v", s)
	}
	if n := len(rc.requests()); n != 3 {
		t.Errorf("%d requests, want 3 (400 once, 408 then 200)", n)
	}
}

// hang is a receiver that holds every request until the client gives up.
func hang(entered chan<- struct{}, ended chan<- struct{}) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		entered <- struct{}{}
		<-r.Context().Done()
		ended <- struct{}{}
	}
}

// TestHungReceiver: Send returns at once while the receiver holds the
// first alert; Close returns when its context ends, cancelling the
// attempt in flight; what was left is counted dropped.
func TestHungReceiver(t *testing.T) {
	entered, ended := make(chan struct{}, 8), make(chan struct{}, 8)
	rc := newReceiver(t, false, hang(entered, ended))
	h := start(t, Config{URLs: []string{rc.srv.URL}, Timeout: time.Hour}, nil)
	send(t, h.d, Alert{Title: "first", Job: "1"})
	<-entered
	send(t, h.d, Alert{Title: "second", Job: "2"}) // the sink is busy: this must not wait
	if s := h.sink(t, 0); s.Queued != 1 {
		t.Errorf("queued %d, want 1", s.Queued)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := h.d.Close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 alert(s) queued") {
		t.Fatalf("Close: %v", err)
	}
	<-ended // the attempt in flight was cancelled
	h.d.wg.Wait()
	if s := h.sink(t, 0); s.Dropped != 2 || s.Sent+s.Failed != 0 {
		t.Errorf("stats %+v", s)
	}
	if ok, why := h.d.Send(verdict()); ok || !strings.Contains(why, "closed") {
		t.Errorf("Send after Close: %v %q", ok, why)
	}
}

// TestAttemptTimeout: an attempt the receiver never answers ends at the
// timeout and is retried, then counted failed.
func TestAttemptTimeout(t *testing.T) {
	entered, ended := make(chan struct{}, 8), make(chan struct{}, 8)
	rc := newReceiver(t, false, hang(entered, ended))
	h := start(t, Config{URLs: []string{rc.srv.URL}, Timeout: 100 * time.Millisecond, MaxAttempts: 2}, nil)
	send(t, h.d, verdict())
	h.drain(t)
	if s := h.sink(t, 0); s.Failed != 1 || s.Retried != 1 || !strings.Contains(s.LastError, "no answer within 100ms") {
		t.Errorf("stats %+v", s)
	}
	for range 2 {
		<-ended
	}
}

// TestReceiverDown: connection refused is retried, then counted failed and
// logged with the sink's endpoint, never the URL's token.
func TestReceiverDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const token = "XSECRETTOKEN0123456789"
	h := start(t, Config{URLs: []string{"http://" + addr + "/services/T000/B000/" + token}, MaxAttempts: 3}, nil)
	send(t, h.d, verdict())
	h.drain(t)
	s := h.sink(t, 0)
	if s.Failed != 1 || s.Retried != 2 || len(h.waits.all()) != 2 {
		t.Errorf("stats %+v, waits %v", s, h.waits.all())
	}
	log := h.log.String()
	if !strings.Contains(log, "alert not delivered") || !strings.Contains(log, "endpoint=http://"+addr) || !strings.Contains(log, "connection refused") {
		t.Errorf("the failure is not logged with its endpoint and cause:\n%s", log)
	}
	for _, secret := range []string{token, "/services/", "B000"} {
		if strings.Contains(log, secret) || strings.Contains(s.LastError, secret) {
			t.Errorf("%q in the log or the stats:\n%s\n%s", secret, log, s.LastError)
		}
	}
}

// TestRedirects: a redirect to another host is not followed (the body and
// the URL's token stay where they were sent); one on the same host is.
func TestRedirects(t *testing.T) {
	other := newReceiver(t, false, nil)
	away := newReceiver(t, false, func(w http.ResponseWriter, r *http.Request, n int) {
		http.Redirect(w, r, other.srv.URL+"/steal", http.StatusTemporaryRedirect)
	})
	var self *receiver
	self = newReceiver(t, false, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/old" {
			http.Redirect(w, r, self.srv.URL+"/new", http.StatusPermanentRedirect)
		}
	})
	h := start(t, Config{URLs: []string{away.srv.URL + "/hook", self.srv.URL + "/old"}}, nil)
	send(t, h.d, verdict())
	h.drain(t)
	if n := len(other.requests()); n != 0 {
		t.Errorf("the other host got %d request(s)", n)
	}
	s := h.sink(t, 0)
	if s.Failed != 1 || s.Retried != 0 || !strings.Contains(s.LastError, "redirect to "+other.srv.URL+" was not followed") {
		t.Errorf("stats %+v", s)
	}
	reqs := self.requests()
	if s := h.sink(t, 1); s.Sent != 1 || len(reqs) != 2 || reqs[1].path != "/new" || !bytes.Equal(reqs[0].body, reqs[1].body) {
		t.Errorf("same-host redirect: stats %+v, requests %v", s, reqs)
	}
}

// TestQueueOverflow: past the queue an alert is dropped, counted and
// logged; Send says so at once.
func TestQueueOverflow(t *testing.T) {
	entered, release := make(chan struct{}, 8), make(chan struct{})
	rc := newReceiver(t, false, func(w http.ResponseWriter, r *http.Request, n int) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	h := start(t, Config{URLs: []string{rc.srv.URL}, QueueSize: 1}, nil)
	send(t, h.d, Alert{Title: "1", Job: "1"})
	<-entered
	send(t, h.d, Alert{Title: "2", Job: "2"})
	ok, why := h.d.Send(Alert{Title: "3", Job: "3"})
	if ok || !strings.Contains(why, "queue is full") {
		t.Errorf("Send past the queue: %v %q", ok, why)
	}
	if s := h.sink(t, 0); s.Dropped != 1 || s.Queued != 1 {
		t.Errorf("stats %+v", s)
	}
	if !strings.Contains(h.log.String(), "queue is full") {
		t.Errorf("the drop is not logged:\n%s", h.log.String())
	}
	close(release)
	h.drain(t)
	if s := h.sink(t, 0); s.Sent != 2 {
		t.Errorf("stats %+v", s)
	}
}

// TestSinksIndependent: a hung sink does not delay another, and each sink
// keeps its alerts in order.
func TestSinksIndependent(t *testing.T) {
	entered, release := make(chan struct{}, 8), make(chan struct{})
	stuck := newReceiver(t, false, func(w http.ResponseWriter, r *http.Request, n int) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	fine := newReceiver(t, false, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(http.StatusBadGateway) // retried: order must still hold
		}
	})
	h := start(t, Config{URLs: []string{stuck.srv.URL, fine.srv.URL}}, nil)
	var titles []string
	for i := range 5 {
		titles = append(titles, fmt.Sprint("alert ", i))
		send(t, h.d, Alert{Title: titles[i], Job: fmt.Sprint(i)})
	}
	<-entered
	// All five reach the good sink while the stuck one holds the first.
	for range 6 {
		<-fine.got
	}
	if s := h.sink(t, 0); s.Queued != 4 || s.Sent != 0 {
		t.Errorf("stuck sink %+v", s)
	}
	close(release)
	h.drain(t)
	for _, rc := range []*receiver{stuck, fine} {
		var got []string
		for _, r := range rc.requests() {
			var g genericBody
			if err := json.Unmarshal(r.body, &g); err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 || got[len(got)-1] != g.Title {
				got = append(got, g.Title)
			}
		}
		if strings.Join(got, ",") != strings.Join(titles, ",") {
			t.Errorf("order %v, want %v", got, titles)
		}
	}
}

// TestIncidents: one alert per incident within the cooldown, follow-ups
// and recoveries, dead-man alerts, on an injected clock.
func TestIncidents(t *testing.T) {
	rc := newReceiver(t, false, nil)
	now := t0
	h := start(t, Config{URLs: []string{rc.srv.URL}, Now: func() time.Time { return now }}, nil)
	inc := Alert{Kind: Incident, Title: "hung", Job: "j", Culprits: "3", Category: "straggler"}
	expect := func(a Alert, queued bool, reason string) {
		t.Helper()
		ok, why := h.d.Send(a)
		if ok != queued || !strings.Contains(why, reason) || queued && why != "" {
			t.Errorf("Send(%s %q): %v %q, want %v %q", a.Kind, a.Title, ok, why, queued, reason)
		}
	}
	var sent []string
	want := func(a Alert) { sent = append(sent, string(a.Kind)+":"+a.Title); expect(a, true, "") }

	want(inc)
	expect(inc, false, "suppressed: incident ⟦j|3|straggler⟧ was alerted at 2025-03-04T05:06:07Z; its cooldown (1h0m0s) lasts until 2025-03-04T06:06:07Z")
	now = t0.Add(59 * time.Minute)
	expect(inc, false, "suppressed")
	other := inc
	other.Culprits, other.Title = "5", "hung elsewhere"
	want(other)
	now = t0.Add(61 * time.Minute)
	inc.Title = "still hung"
	want(inc) // the cooldown is over: a reminder
	moves := Alert{Kind: FollowUp, Recovered: true, Level: Info, Title: "moves again", Job: "j", Culprits: "3", Category: "straggler"}
	want(moves) // info, below warn, but its incident was alerted
	inc.Title = "hung again"
	want(inc) // the on-call was told it ended: a new hang alerts at once
	expect(Alert{Kind: FollowUp, Recovered: true, Level: Info, Title: "x", Job: "never"}, false, "no alert was sent for incident")
	want(Alert{Kind: FollowUp, Level: Error, Title: "died", Job: "never2"})
	expect(Alert{Kind: Incident, Level: Info, Title: "meh", Job: "k"}, false, "level info is below PROBING_WEBHOOK_MIN_LEVEL=warn")
	// The job's name is hostile and long: the key is made before the
	// fields are clipped, so the watcher's DeadManKey(job) still finds it.
	job := "j\n" + strings.Repeat("x", 300)
	blind := Alert{Kind: DeadMan, Title: "blind", Job: job}
	want(blind)
	expect(blind, false, "suppressed")
	want(Alert{Kind: Resolved, Title: "sees again", IncidentKey: DeadManKey(job)})
	want(blind)
	// The same with a follow-up built from the incident's raw fields.
	long := Alert{Kind: Incident, Title: "long", Job: job, Culprits: strings.Repeat("1,", 200)}
	want(long)
	want(Alert{Kind: FollowUp, Recovered: true, Level: Info, Title: "long moves", Job: job, Culprits: long.Culprits})
	h.drain(t)

	var got []string
	for _, r := range rc.requests() {
		var g genericBody
		if err := json.Unmarshal(r.body, &g); err != nil {
			t.Fatal(err)
		}
		got = append(got, string(g.Kind)+":"+g.Title)
		if g.Kind == DeadMan && g.Level != Error {
			t.Errorf("dead_man at level %s", g.Level)
		}
	}
	if strings.Join(got, " ") != strings.Join(sent, " ") {
		t.Errorf("delivered\n  %v\nwant\n  %v", got, sent)
	}
	if st := h.d.Stats(); st.Suppressed != 3 || st.BelowLevel != 2 || st.Sinks[0].Sent != int64(len(sent)) {
		t.Errorf("stats %+v", st)
	}
}

func TestNoCooldownAndNoSinks(t *testing.T) {
	rc := newReceiver(t, false, nil)
	h := start(t, Config{URLs: []string{rc.srv.URL}, Cooldown: NoCooldown}, nil)
	send(t, h.d, verdict())
	send(t, h.d, verdict())
	h.drain(t)
	if n := len(rc.requests()); n != 2 {
		t.Errorf("%d delivered, want 2 without a cooldown", n)
	}
	none := start(t, Config{}, nil)
	if ok, why := none.d.Send(verdict()); ok || !strings.Contains(why, "set PROBING_WEBHOOK_URL or PROBING_PAGERDUTY_ROUTING_KEY") {
		t.Errorf("no sinks: %v %q", ok, why)
	}
	bad := start(t, Config{URLs: []string{"http://hooks.slack.com/services/T/B/SECRETSECRETSECRET"}}, nil)
	if len(bad.d.Stats().Sinks) != 0 || !strings.Contains(bad.log.String(), "alert sink left out") || strings.Contains(bad.log.String(), "SECRETSECRET") {
		t.Errorf("an invalid sink: %+v\n%s", bad.d.Stats(), bad.log.String())
	}
}

func TestRetryAfterParse(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"": 0, "5": 5 * time.Second, "0.5": 500 * time.Millisecond, "-3": 0, "junk": 0, "1e9": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("Retry-After %q: %s, want %s", v, got, want)
		}
	}
	for attempt := 1; attempt < 30; attempt++ {
		if b := backoff(attempt); b <= 0 || b > backoffCap {
			t.Errorf("backoff(%d) = %s", attempt, b)
		}
	}
}

// BenchmarkSend is what the watcher pays per alert: normalizing it and
// queueing it on two sinks (delivery runs in the background; past the
// queues the alerts are dropped, which costs no less).
func BenchmarkSend(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	d := New(Config{URLs: []string{srv.URL + "/a", srv.URL + "/b"}, Cooldown: NoCooldown, QueueSize: maxQueue}, nil, nil)
	defer d.Close(context.Background())
	a := verdict()
	b.ReportAllocs()
	for b.Loop() {
		d.Send(a)
	}
}
