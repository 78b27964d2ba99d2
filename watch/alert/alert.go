// Package alert delivers the watcher's alerts to the on-call engineer:
// Slack (Block Kit) and Discord (embed) webhooks chosen from the URL as
// Trackio does, a generic JSON body for any other URL, and PagerDuty
// Events v2 when a routing key is set.
//
// Delivery never blocks the watcher: Send normalizes the alert, decides
// whether it is due (the minimum level, one alert per incident within a
// cooldown) and queues it on every sink's bounded queue; each sink has its
// own goroutine, so a dead Slack never delays Discord, and keeps its
// alerts in order. An attempt is bounded by a timeout, retried with
// jittered exponential backoff on network errors, 408, 429 (Retry-After
// honoured, bounded) and 5xx, within a bounded time per alert.
//
// Text that came from the job (file and function names, evidence lines)
// is hostile: every field is clipped, control and invisible characters
// are escaped (internal/jobtext), and what a format interprets is escaped
// for it. A webhook URL's path and query hold its token and the routing
// key is a secret: neither is logged, returned in an error or put in
// another sink's payload; only a sink's index, format and scheme://host
// are. Plain http is allowed only to loopback addresses and a redirect is
// followed only to the same scheme and host.
package alert

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// Level is an alert's severity, Trackio's three.
type Level string

// The levels, lowest first.
const (
	Info  Level = "info"
	Warn  Level = "warn"
	Error Level = "error"
)

func (l Level) rank() int {
	switch l {
	case Info:
		return 1
	case Warn:
		return 2
	case Error:
		return 3
	}
	return 0
}

// ParseLevel reads a level as PROBING_WEBHOOK_MIN_LEVEL spells it (any
// case; "warning" is warn).
func ParseLevel(s string) (Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "info":
		return Info, nil
	case "warn", "warning":
		return Warn, nil
	case "error":
		return Error, nil
	}
	return "", fmt.Errorf("level %q: want info, warn or error", jobtext.Escape(s, 32))
}

// Kind is what an alert says about the incident.
type Kind string

const (
	// Incident: the job is hung (or slow, or a rank died); the verdict's
	// headline. One per incident key within the cooldown.
	Incident Kind = "incident"
	// FollowUp: news about an incident alerted before: the job moves
	// again (Recovered) or died. It is not held back by the cooldown, and
	// it passes the minimum level when its incident was alerted, so the
	// on-call who was paged hears the end of it.
	FollowUp Kind = "follow_up"
	// DeadMan: the watcher itself cannot see the job (its heartbeat is
	// gone); level error unless set.
	DeadMan Kind = "dead_man"
	// Resolved: the incident is over (PagerDuty resolves it).
	Resolved Kind = "resolved"
)

// Alert is one message to the on-call. Job-derived fields are hostile
// text: Send clips and escapes them.
type Alert struct {
	Kind  Kind
	Level Level // default: error for incident and dead_man, info otherwise
	// Title is short: at most 63 characters (W&B's limit is < 64), cut
	// with an ellipsis when longer.
	Title string
	// Text is a few lines: the verdict's summary.
	Text string
	// Job is the job's id or name, Host the host the watcher runs on.
	Job, Host string
	Time      time.Time // default: now
	// The verdict's headline: State ("hung"), Category, Culprits as rank
	// ranges ("1,4-7"), Where ("train.py:123 (step)"), Confidence.
	State, Category, Culprits, Where, Confidence string
	// Evidence: the strongest lines; at most 3 are kept, each clipped.
	Evidence []string
	// LookCloser is the command that shows more, e.g.
	// "probing-mcp diagnose --history 42".
	LookCloser string
	HistoryID  int64
	// IncidentKey groups an incident's alerts (dedup, cooldown, follow-up,
	// PagerDuty's dedup_key). Default: job|culprits|category, or
	// DeadManKey(job) for a dead_man alert; a follow-up must carry its
	// incident's key (or the same job, culprits and category).
	IncidentKey string
	// Recovered marks a follow_up that says the job moves again
	// (PagerDuty resolve); false: it died or got worse (a trigger that
	// updates the incident).
	Recovered bool
}

// DeadManKey is the default incident key of a dead_man alert for job; a
// resolved alert with this key ends it.
func DeadManKey(job string) string { return "dead_man|" + job }

// Bounds on the normalized fields, in bytes of escaped text.
const (
	maxTitleRunes = 63
	maxText       = 2000
	maxTextLines  = 20
	maxName       = 128 // job, host
	maxWord       = 64  // state, category, confidence
	maxCulprits   = 256
	maxWhere      = 300
	maxEvidence   = 3
	maxEvidLine   = 300
	maxLookCloser = 300
	maxKey        = 512
	minSecret     = 8 // shorter "secrets" are not redacted: they would mangle the text
)

// Redacted replaces a secret found in an alert's text.
const Redacted = "[redacted]"

// normalize returns a with its defaults set and every string field
// redacted, escaped and bounded; an unknown kind or level is an error.
func normalize(a Alert, now time.Time, secrets []string) (Alert, error) {
	if a.Kind == "" {
		a.Kind = Incident
	}
	switch a.Kind {
	case Incident, FollowUp, DeadMan, Resolved:
	default:
		return a, fmt.Errorf("unknown alert kind %q: want incident, follow_up, dead_man or resolved", jobtext.Escape(string(a.Kind), 32))
	}
	if a.Level == "" {
		a.Level = Info
		if a.Kind == Incident || a.Kind == DeadMan {
			a.Level = Error
		}
	}
	if a.Level.rank() == 0 {
		return a, fmt.Errorf("unknown alert level %q: want info, warn or error", jobtext.Escape(string(a.Level), 32))
	}
	// The default key from the fields as given, so that a follow-up (or
	// DeadManKey(job)) built from the same raw fields finds it.
	if a.IncidentKey == "" {
		a.IncidentKey = a.Job + "|" + a.Culprits + "|" + a.Category
		if a.Kind == DeadMan {
			a.IncidentKey = DeadManKey(a.Job)
		}
	}
	if a.Time.IsZero() {
		a.Time = now
	}
	a.Time = a.Time.UTC()
	red := func(s string) string { return redact(s, secrets) }
	line := func(s string, n int) string { return jobtext.Escape(red(s), n) }
	a.Job = line(a.Job, maxName)
	a.Host = line(a.Host, maxName)
	a.State = line(a.State, maxWord)
	a.Category = line(a.Category, maxWord)
	a.Confidence = line(a.Confidence, maxWord)
	a.Culprits = line(a.Culprits, maxCulprits)
	a.Where = line(a.Where, maxWhere)
	a.LookCloser = line(a.LookCloser, maxLookCloser)
	a.Title = title(line(a.Title, 4*maxTitleRunes), a)
	a.Text = text(red(a.Text))
	var ev []string
	for _, e := range a.Evidence {
		if len(ev) == maxEvidence {
			break
		}
		if e = line(strings.TrimSpace(e), maxEvidLine); e != "" {
			ev = append(ev, e)
		}
	}
	a.Evidence = ev
	if len(a.IncidentKey) > maxKey {
		// Keys that share a long head stay apart.
		sum := sha256.Sum256([]byte(a.IncidentKey))
		a.IncidentKey = line(a.IncidentKey, maxKey-20) + "#" + hex.EncodeToString(sum[:8])
	} else {
		a.IncidentKey = line(a.IncidentKey, maxKey)
	}
	return a, nil
}

// title is t within maxTitleRunes runes ("…" at a cut); an empty title
// says what the alert is.
func title(t string, a Alert) string {
	t = strings.TrimSpace(t)
	if t == "" {
		switch a.Kind {
		case DeadMan:
			t = "watcher cannot see the job"
		case Resolved:
			t = "incident resolved"
		case FollowUp:
			t = "job died"
			if a.Recovered {
				t = "job moves again"
			}
		default:
			t = "training job " + or(a.State, "needs attention")
		}
		if a.Job != "" {
			t += ": " + a.Job
		}
	}
	if utf8.RuneCountInString(t) <= maxTitleRunes {
		return t
	}
	n := 0
	for i := range t {
		if n == maxTitleRunes-1 {
			return t[:i] + "…"
		}
		n++
	}
	return t
}

// text is s as at most maxTextLines lines, each escaped, within maxText
// bytes in all.
func text(s string) string {
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(s, "\r\n", "\n")), "\n")
	var b strings.Builder
	for i, l := range lines {
		if i == maxTextLines {
			b.WriteString("\n…")
			break
		}
		l = jobtext.Escape(strings.TrimRight(l, " \t"), maxText)
		if b.Len()+len(l)+1 > maxText {
			room := maxText - b.Len() - 1
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(jobtext.Cut(l, max(room, 0)))
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l)
	}
	return b.String()
}

// redact replaces every secret of at least minSecret bytes in s.
func redact(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= minSecret && strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	return s
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
