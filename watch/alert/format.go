package alert

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The body builders take a normalized alert (normalize): every field is
// bounded and escaped for plain text already; each format escapes what it
// interprets and keeps within its receiver's limits.

// Level emojis and Discord colours (Trackio's).
var (
	levelEmoji  = map[Level]string{Info: "ℹ️", Warn: "⚠️", Error: "🚨"}
	levelColour = map[Level]int{Info: 3447003, Warn: 16776960, Error: 15158332}
)

const recoveredEmoji = "✅"

// headline is "⚠️ [WARN] title".
func headline(a Alert) string {
	e := levelEmoji[a.Level]
	if a.Kind == Resolved || a.Kind == FollowUp && a.Recovered {
		e = recoveredEmoji
	}
	return e + " [" + strings.ToUpper(string(a.Level)) + "] " + a.Title
}

// field is one labelled item of the verdict's headline, in the order the
// formats show them.
type field struct{ name, value string }

func fields(a Alert) []field {
	var out []field
	for _, f := range []field{
		{"State", a.State}, {"Culprit ranks", a.Culprits}, {"Category", a.Category},
		{"Where", a.Where}, {"Confidence", a.Confidence},
	} {
		if f.value != "" {
			out = append(out, f)
		}
	}
	return out
}

// lookCloser is the command to run for more, or the history id.
func lookCloser(a Alert) string {
	switch {
	case a.LookCloser != "":
		return a.LookCloser
	case a.HistoryID > 0:
		return "history id " + strconv.FormatInt(a.HistoryID, 10)
	}
	return ""
}

// footer is "job • host • time", the parts present.
func footer(a Alert, withTime bool) string {
	var parts []string
	for _, p := range []string{a.Job, a.Host} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if withTime {
		parts = append(parts, a.Time.Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return "probing-mcp"
	}
	return strings.Join(parts, " • ")
}

// marshal is json.Marshal without HTML escaping (<, >, & stay one byte:
// the formats escape what they interpret themselves).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// cutRunes cuts s to at most n bytes on a rune boundary, "…" (3 bytes)
// included when cut; keep says whether a cut at i is allowed (not inside
// an escape).
func cutRunes(s string, n int, keep func(s string) string) string {
	if len(s) <= n {
		return s
	}
	i := max(n-len("…"), 0)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return keep(s[:i]) + "…"
}

// ---- Slack (Block Kit) ----

type slackText struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	Emoji bool   `json:"emoji,omitempty"`
}

type slackBlock struct {
	Type     string      `json:"type"`
	Text     *slackText  `json:"text,omitempty"`
	Fields   []slackText `json:"fields,omitempty"`
	Elements []slackText `json:"elements,omitempty"`
}

type slackBody struct {
	Text   string       `json:"text"` // the notification's fallback
	Blocks []slackBlock `json:"blocks"`
}

// Slack's limits: section text 3000, a field 2000,
// 10 fields, a context element 2000 (bytes bound characters).
const (
	slackSection = 3000
	slackField   = 2000
	slackEvLine  = 900
)

// slackEsc escapes what mrkdwn interprets (&, <, >: no <!channel>, no
// <url|link>) and cuts the result to n bytes, never inside an entity.
func slackEsc(s string, n int) string {
	s = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
	return cutRunes(s, n, func(p string) string {
		if k := strings.LastIndexByte(p, '&'); k >= 0 && !strings.Contains(p[k:], ";") {
			return p[:k]
		}
		return p
	})
}

// slackCode is s in a code span: backticks would end it early.
func slackCode(s string) string {
	return "`" + slackEsc(strings.ReplaceAll(s, "`", "'"), slackField-2) + "`"
}

func buildSlack(a Alert) ([]byte, error) {
	head := headline(a)
	// The title is at most 63 characters, so the header is within Slack's
	// 150; plain_text interprets nothing.
	body := slackBody{Text: slackEsc(head, slackSection)}
	body.Blocks = append(body.Blocks, slackBlock{Type: "header",
		Text: &slackText{Type: "plain_text", Text: head, Emoji: true}})
	if a.Text != "" {
		body.Blocks = append(body.Blocks, slackBlock{Type: "section",
			Text: &slackText{Type: "mrkdwn", Text: slackEsc(a.Text, slackSection)}})
	}
	if fs := fields(a); len(fs) > 0 {
		b := slackBlock{Type: "section"}
		for _, f := range fs {
			b.Fields = append(b.Fields, slackText{Type: "mrkdwn", Text: "*" + f.name + "*\n" + slackEsc(f.value, slackField-len(f.name)-3)})
		}
		body.Blocks = append(body.Blocks, b)
	}
	if len(a.Evidence) > 0 {
		var t strings.Builder
		t.WriteString("*Evidence*")
		for _, e := range a.Evidence {
			t.WriteString("\n• " + slackEsc(e, slackEvLine))
		}
		body.Blocks = append(body.Blocks, slackBlock{Type: "section", Text: &slackText{Type: "mrkdwn", Text: t.String()}})
	}
	if lc := lookCloser(a); lc != "" {
		body.Blocks = append(body.Blocks, slackBlock{Type: "context",
			Elements: []slackText{{Type: "mrkdwn", Text: "Look closer: " + slackCode(lc)}}})
	}
	body.Blocks = append(body.Blocks, slackBlock{Type: "context",
		Elements: []slackText{{Type: "mrkdwn", Text: slackEsc(footer(a, true), slackField)}}})
	return marshal(body)
}

func id(s string) string { return s }

// ---- Discord (embed) ----

type discordField struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Inline bool   `json:"inline"`
}

type discordFooter struct {
	Text string `json:"text"`
}

type discordEmbed struct {
	Title       string         `json:"title"`
	Description string         `json:"description,omitempty"`
	Color       int            `json:"color"`
	Fields      []discordField `json:"fields,omitempty"`
	Footer      discordFooter  `json:"footer"`
	Timestamp   string         `json:"timestamp"`
}

type discordMentions struct {
	Parse []string `json:"parse"`
}

type discordBody struct {
	// AllowedMentions with no parse: an @everyone in job text pings nobody.
	AllowedMentions discordMentions `json:"allowed_mentions"`
	Embeds          []discordEmbed  `json:"embeds"`
}

// Discord's limits: title 256, description 4096, 25 fields, a field's
// value 1024, footer 2048, 6000 for the whole embed. Ours are lower, so
// the sum stays under 6000 (checked after building).
const (
	discordTitle       = 256
	discordDescription = 2048
	discordFieldValue  = 1024
	discordFields      = 25
	discordFooterLen   = 512
	discordTotal       = 6000
)

// discordMarkdown are the characters Discord's markdown interprets: a
// backslash shows each as itself, so job text cannot make a masked link,
// a spoiler, a heading or a mention.
var discordMarkdown = strings.NewReplacer(
	`\`, `\\`, "*", `\*`, "_", `\_`, "~", `\~`, "`", "\\`", "|", `\|`,
	"[", `\[`, "]", `\]`, "<", `\<`, ">", `\>`, "#", `\#`, "@", `\@`)

// discordEsc escapes s for Discord's markdown and cuts it to n bytes,
// never between a backslash and what it escapes.
func discordEsc(s string, n int) string {
	return cutRunes(discordMarkdown.Replace(s), n, func(p string) string {
		k := len(p)
		for k > 0 && p[k-1] == '\\' {
			k--
		}
		if (len(p)-k)%2 == 1 {
			return p[:len(p)-1]
		}
		return p
	})
}

func buildDiscord(a Alert) ([]byte, error) {
	// The title shows no links and the footer no markdown at all: they
	// are cut, not escaped (a backslash would show).
	e := discordEmbed{
		Title:       cutRunes(headline(a), discordTitle, id),
		Description: discordEsc(a.Text, discordDescription),
		Color:       levelColour[a.Level],
		Footer:      discordFooter{Text: cutRunes(footer(a, false), discordFooterLen, id)},
		Timestamp:   a.Time.Format(time.RFC3339),
	}
	for _, f := range fields(a) {
		e.Fields = append(e.Fields, discordField{Name: f.name, Value: discordEsc(f.value, discordFieldValue), Inline: f.name != "Where"})
	}
	if len(a.Evidence) > 0 {
		per := discordFieldValue / len(a.Evidence)
		var lines []string
		for _, ev := range a.Evidence {
			lines = append(lines, "• "+discordEsc(ev, per-len("• \n")))
		}
		e.Fields = append(e.Fields, discordField{Name: "Evidence", Value: strings.Join(lines, "\n")})
	}
	if lc := lookCloser(a); lc != "" {
		// A code span shows the command as is; a backtick would end it.
		e.Fields = append(e.Fields, discordField{Name: "Look closer",
			Value: "`" + cutRunes(strings.ReplaceAll(lc, "`", "'"), discordFieldValue-2, id) + "`"})
	}
	e.Fields = e.Fields[:min(len(e.Fields), discordFields)]
	if over := discordSize(e) - discordTotal; over > 0 {
		e.Description = discordEsc(a.Text, max(len(e.Description)-over, 0))
	}
	return marshal(discordBody{AllowedMentions: discordMentions{Parse: []string{}}, Embeds: []discordEmbed{e}})
}

// discordSize is what Discord counts against the embed's 6000.
func discordSize(e discordEmbed) int {
	n := len(e.Title) + len(e.Description) + len(e.Footer.Text)
	for _, f := range e.Fields {
		n += len(f.Name) + len(f.Value)
	}
	return n
}

// ---- generic JSON (a superset of Trackio's) ----

type genericBody struct {
	Level       Level    `json:"level"`
	Title       string   `json:"title"`
	Text        string   `json:"text"`
	Kind        Kind     `json:"kind"`
	Recovered   bool     `json:"recovered"`
	Job         string   `json:"job"`
	Host        string   `json:"host"`
	Timestamp   string   `json:"timestamp"`
	State       string   `json:"state"`
	Category    string   `json:"category"`
	Culprits    string   `json:"culprits"`
	Where       string   `json:"where"`
	Confidence  string   `json:"confidence"`
	Evidence    []string `json:"evidence"`
	LookCloser  string   `json:"look_closer"`
	HistoryID   int64    `json:"history_id"`
	IncidentKey string   `json:"incident_key"`
	// Trackio's names, for receivers written for it: project is the job,
	// run the host, step unknown.
	Project string `json:"project"`
	Run     string `json:"run"`
	Step    *int   `json:"step"`
}

func buildGeneric(a Alert) ([]byte, error) {
	ev := a.Evidence
	if ev == nil {
		ev = []string{}
	}
	return marshal(genericBody{
		Level: a.Level, Title: a.Title, Text: a.Text, Kind: a.Kind, Recovered: a.Recovered,
		Job: a.Job, Host: a.Host, Timestamp: a.Time.Format(time.RFC3339),
		State: a.State, Category: a.Category, Culprits: a.Culprits, Where: a.Where, Confidence: a.Confidence,
		Evidence: ev, LookCloser: a.LookCloser, HistoryID: a.HistoryID, IncidentKey: a.IncidentKey,
		Project: a.Job, Run: a.Host,
	})
}

// ---- PagerDuty Events API v2 ----

type pdPayload struct {
	Summary       string         `json:"summary"`
	Source        string         `json:"source"`
	Severity      string         `json:"severity"`
	Timestamp     string         `json:"timestamp"`
	Component     string         `json:"component,omitempty"`
	Class         string         `json:"class,omitempty"`
	CustomDetails map[string]any `json:"custom_details"`
}

type pdBody struct {
	RoutingKey  string     `json:"routing_key"`
	EventAction string     `json:"event_action"`
	DedupKey    string     `json:"dedup_key"`
	Client      string     `json:"client"`
	Payload     *pdPayload `json:"payload,omitempty"`
}

// PagerDuty's limits: summary 1024 characters, dedup_key 255.
const (
	pdSummary = 1024
	pdDedup   = 255
)

// pdAction: a recovery resolves the incident; anything else triggers (a
// trigger with an open incident's dedup_key updates it).
func pdAction(a Alert) string {
	if a.Kind == Resolved || a.Kind == FollowUp && a.Recovered {
		return "resolve"
	}
	return "trigger"
}

// pdSeverity maps the level; the watcher gone blind is critical: nobody
// is watching the job any more.
func pdSeverity(a Alert) string {
	if a.Kind == DeadMan {
		return "critical"
	}
	return map[Level]string{Info: "info", Warn: "warning", Error: "error"}[a.Level]
}

// pdDedupKey is the incident key, hashed when past PagerDuty's 255.
func pdDedupKey(key string) string {
	if len(key) <= pdDedup {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// pdSummaryOf is "[ERROR] title: state; ranks …; category; where".
func pdSummaryOf(a Alert) string {
	s := "[" + strings.ToUpper(string(a.Level)) + "] " + a.Title
	var parts []string
	for _, f := range fields(a) {
		if f.name != "Confidence" {
			parts = append(parts, strings.ToLower(f.name)+" "+f.value)
		}
	}
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, "; ")
	}
	return cutRunes(s, pdSummary, id)
}

func buildPagerDuty(a Alert, routingKey string) ([]byte, error) {
	b := pdBody{RoutingKey: routingKey, EventAction: pdAction(a), DedupKey: pdDedupKey(a.IncidentKey), Client: "probing-mcp"}
	if b.EventAction == "trigger" {
		details := map[string]any{"kind": a.Kind, "job": a.Job, "level": a.Level}
		for k, v := range map[string]string{"text": a.Text, "state": a.State, "category": a.Category,
			"culprits": a.Culprits, "where": a.Where, "confidence": a.Confidence, "look_closer": a.LookCloser} {
			if v != "" {
				details[k] = v
			}
		}
		if len(a.Evidence) > 0 {
			details["evidence"] = a.Evidence
		}
		if a.HistoryID > 0 {
			details["history_id"] = a.HistoryID
		}
		b.Payload = &pdPayload{Summary: pdSummaryOf(a), Source: or(a.Host, "probing-mcp"), Severity: pdSeverity(a),
			Timestamp: a.Time.Format(time.RFC3339), Component: a.Job, Class: a.Category, CustomDetails: details}
	}
	return marshal(b)
}
