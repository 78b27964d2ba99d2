package alert

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

// verdict is a typical incident alert, as the watcher sends it.
func verdict() Alert {
	return Alert{
		Kind: Incident, Level: Error,
		Title: "Job hung: rank 3 stuck in all_reduce",
		Text:  "The job is hung: ranks 1,4-7 wait in all_reduce for rank 3.\nRank 3 is in a data loader.",
		Job:   "llama-70b", Host: "node-07", Time: t0,
		State: "hung", Category: "straggler", Culprits: "1,4-7", Where: "train.py:123 (step)", Confidence: "high",
		Evidence:   []string{"rank 3: last collective #41, the others #42", "rank 3 stack: loader.py:88 (next)", "GPU 3 idle", "a fourth line"},
		LookCloser: "probing-mcp diagnose --history 42", HistoryID: 42,
	}
}

func norm(t *testing.T, a Alert) Alert {
	t.Helper()
	n, err := normalize(a, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, b)
	}
	return m
}

// get walks m by keys and indexes ("blocks", 0, "text").
func get(t *testing.T, m any, path ...any) any {
	t.Helper()
	cur := m
	for _, p := range path {
		switch k := p.(type) {
		case string:
			o, ok := cur.(map[string]any)
			if !ok {
				t.Fatalf("%v: not an object at %q", path, k)
			}
			if cur, ok = o[k]; !ok {
				t.Fatalf("%v: no key %q in %v", path, k, o)
			}
		case int:
			a, ok := cur.([]any)
			if !ok || k >= len(a) {
				t.Fatalf("%v: no index %d in %v", path, k, cur)
			}
			cur = a[k]
		}
	}
	return cur
}

func str(t *testing.T, m any, path ...any) string {
	t.Helper()
	s, ok := get(t, m, path...).(string)
	if !ok {
		t.Fatalf("%v: not a string: %v", path, get(t, m, path...))
	}
	return s
}

func TestSlackBlockKit(t *testing.T) {
	b, err := buildSlack(norm(t, verdict()))
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, b)
	if got := str(t, m, "text"); got != "🚨 [ERROR] Job hung: rank 3 stuck in all_reduce" {
		t.Errorf("fallback text %q", got)
	}
	blocks := get(t, m, "blocks").([]any)
	types := []string{}
	for i := range blocks {
		types = append(types, str(t, m, "blocks", i, "type"))
	}
	if want := "header section section section context context"; strings.Join(types, " ") != want {
		t.Fatalf("blocks %v, want %s", types, want)
	}
	if str(t, m, "blocks", 0, "text", "type") != "plain_text" || str(t, m, "blocks", 0, "text", "text") != "🚨 [ERROR] Job hung: rank 3 stuck in all_reduce" {
		t.Errorf("header %v", get(t, m, "blocks", 0))
	}
	if str(t, m, "blocks", 1, "text", "type") != "mrkdwn" || !strings.HasPrefix(str(t, m, "blocks", 1, "text", "text"), "The job is hung: ranks 1,4-7") {
		t.Errorf("text section %v", get(t, m, "blocks", 1))
	}
	wantFields := []string{"*State*\nhung", "*Culprit ranks*\n1,4-7", "*Category*\nstraggler", "*Where*\ntrain.py:123 (step)", "*Confidence*\nhigh"}
	for i, w := range wantFields {
		if str(t, m, "blocks", 2, "fields", i, "type") != "mrkdwn" || str(t, m, "blocks", 2, "fields", i, "text") != w {
			t.Errorf("field %d: %v, want %q", i, get(t, m, "blocks", 2, "fields", i), w)
		}
	}
	ev := str(t, m, "blocks", 3, "text", "text")
	if ev != "*Evidence*\n• rank 3: last collective #41, the others #42\n• rank 3 stack: loader.py:88 (next)\n• GPU 3 idle" {
		t.Errorf("evidence (3 lines kept of 4): %q", ev)
	}
	if got := str(t, m, "blocks", 4, "elements", 0, "text"); got != "Look closer: `probing-mcp diagnose --history 42`" {
		t.Errorf("look closer %q", got)
	}
	if got := str(t, m, "blocks", 5, "elements", 0, "text"); got != "llama-70b • node-07 • 2025-03-04T05:06:07Z" {
		t.Errorf("footer %q", got)
	}
	// Levels: an emoji each; a recovery says so.
	for _, c := range []struct {
		a    Alert
		want string
	}{
		{Alert{Level: Info, Title: "x"}, "ℹ️ [INFO] x"},
		{Alert{Level: Warn, Title: "x"}, "⚠️ [WARN] x"},
		{Alert{Kind: FollowUp, Recovered: true, Title: "x"}, "✅ [INFO] x"},
		{Alert{Kind: DeadMan, Job: "j"}, "🚨 [ERROR] watcher cannot see the job: j"},
	} {
		b, _ := buildSlack(norm(t, c.a))
		if got := str(t, decode(t, b), "blocks", 0, "text", "text"); got != c.want {
			t.Errorf("header %q, want %q", got, c.want)
		}
	}
	// An alert with nothing but a title is still valid Block Kit: no
	// empty section (Slack refuses one).
	b, _ = buildSlack(norm(t, Alert{Title: "bare"}))
	if strings.Contains(string(b), `"text":""`) || len(get(t, decode(t, b), "blocks").([]any)) != 2 {
		t.Errorf("bare alert: %s", b)
	}
}

func TestDiscordEmbed(t *testing.T) {
	b, err := buildDiscord(norm(t, verdict()))
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, b)
	if p := get(t, m, "allowed_mentions", "parse").([]any); len(p) != 0 {
		t.Errorf("allowed_mentions.parse %v, want [] (nobody pinged)", p)
	}
	e := get(t, m, "embeds", 0)
	if got := str(t, e, "title"); got != "🚨 [ERROR] Job hung: rank 3 stuck in all_reduce" {
		t.Errorf("title %q", got)
	}
	if got := get(t, e, "color").(float64); got != 15158332 {
		t.Errorf("colour %v", got)
	}
	if !strings.HasPrefix(str(t, e, "description"), `The job is hung: ranks 1,4-7 wait in all\_reduce`) {
		t.Errorf("description %q", str(t, e, "description"))
	}
	want := []struct {
		name, value string
		inline      bool
	}{
		{"State", "hung", true}, {"Culprit ranks", "1,4-7", true}, {"Category", "straggler", true},
		{"Where", "train.py:123 (step)", false}, {"Confidence", "high", true},
		{"Evidence", "• rank 3: last collective \\#41, the others \\#42\n• rank 3 stack: loader.py:88 (next)\n• GPU 3 idle", false},
		{"Look closer", "`probing-mcp diagnose --history 42`", false},
	}
	fs := get(t, e, "fields").([]any)
	if len(fs) != len(want) {
		t.Fatalf("fields %v", fs)
	}
	for i, w := range want {
		if str(t, fs[i], "name") != w.name || str(t, fs[i], "value") != w.value || get(t, fs[i], "inline").(bool) != w.inline {
			t.Errorf("field %d: %v, want %+v", i, fs[i], w)
		}
	}
	if got := str(t, e, "footer", "text"); got != "llama-70b • node-07" {
		t.Errorf("footer %q", got)
	}
	if ts, err := time.Parse(time.RFC3339, str(t, e, "timestamp")); err != nil || !ts.Equal(t0) {
		t.Errorf("timestamp %q: %v", str(t, e, "timestamp"), err)
	}
	for lvl, colour := range map[Level]float64{Info: 3447003, Warn: 16776960, Error: 15158332} {
		b, _ := buildDiscord(norm(t, Alert{Level: lvl, Title: "x"}))
		if got := get(t, decode(t, b), "embeds", 0, "color").(float64); got != colour {
			t.Errorf("%s: colour %v, want %v", lvl, got, colour)
		}
	}
}

// TestDiscordLimits: the largest alert stays within every Discord limit.
func TestDiscordLimits(t *testing.T) {
	big := strings.Repeat("*_[", 400_000)
	a := Alert{Title: big, Text: strings.Repeat(big+"\n", 30), Job: big, Host: big, State: big, Category: big,
		Culprits: big, Where: big, Confidence: big, Evidence: []string{big, big, big}, LookCloser: big}
	b, err := buildDiscord(norm(t, a))
	if err != nil {
		t.Fatal(err)
	}
	var body discordBody
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	checkDiscord(t, body)
	if len(b) > 16<<10 {
		t.Errorf("body is %d bytes", len(b))
	}
}

func checkDiscord(t *testing.T, body discordBody) {
	t.Helper()
	if len(body.Embeds) != 1 {
		t.Fatalf("embeds %d", len(body.Embeds))
	}
	e := body.Embeds[0]
	runes := utf8.RuneCountInString
	if runes(e.Title) > 256 || runes(e.Description) > 4096 || len(e.Fields) > 25 || runes(e.Footer.Text) > 2048 {
		t.Errorf("embed past a limit: title %d, description %d, fields %d, footer %d",
			runes(e.Title), runes(e.Description), len(e.Fields), runes(e.Footer.Text))
	}
	for _, f := range e.Fields {
		if runes(f.Name) > 256 || runes(f.Value) > 1024 || f.Value == "" {
			t.Errorf("field %q: value of %d characters", f.Name, runes(f.Value))
		}
	}
	if n := discordSize(e); n > 6000 {
		t.Errorf("embed holds %d characters, Discord's limit is 6000", n)
	}
}

func TestPagerDutyEvent(t *testing.T) {
	key := "R0UT1NGKEY0123456789abcdefABCDEF"
	b, err := buildPagerDuty(norm(t, verdict()), key)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, b)
	for k, want := range map[string]string{"routing_key": key, "event_action": "trigger", "dedup_key": "llama-70b|1,4-7|straggler", "client": "probing-mcp"} {
		if got := str(t, m, k); got != want {
			t.Errorf("%s %q, want %q", k, got, want)
		}
	}
	for k, want := range map[string]string{
		"summary":   "[ERROR] Job hung: rank 3 stuck in all_reduce: state hung; culprit ranks 1,4-7; category straggler; where train.py:123 (step)",
		"source":    "node-07",
		"severity":  "error",
		"timestamp": "2025-03-04T05:06:07Z",
		"component": "llama-70b",
		"class":     "straggler",
	} {
		if got := str(t, m, "payload", k); got != want {
			t.Errorf("payload.%s %q, want %q", k, got, want)
		}
	}
	cd := get(t, m, "payload", "custom_details").(map[string]any)
	for _, k := range []string{"text", "state", "category", "culprits", "where", "confidence", "look_closer", "evidence", "history_id", "kind", "job"} {
		if _, ok := cd[k]; !ok {
			t.Errorf("custom_details lacks %s: %v", k, cd)
		}
	}
	// Severity by level; the blind watcher is critical.
	for _, c := range []struct {
		a    Alert
		want string
	}{{Alert{Level: Info}, "info"}, {Alert{Level: Warn}, "warning"}, {Alert{Level: Error}, "error"}, {Alert{Kind: DeadMan}, "critical"}} {
		b, _ := buildPagerDuty(norm(t, c.a), key)
		if got := str(t, decode(t, b), "payload", "severity"); got != c.want {
			t.Errorf("%+v: severity %q, want %q", c.a, got, c.want)
		}
	}
	// A recovery resolves with the same dedup_key and no payload; a death
	// triggers (updating the incident).
	inc := norm(t, verdict())
	for _, c := range []struct {
		a    Alert
		want string
	}{
		{Alert{Kind: Resolved, IncidentKey: inc.IncidentKey}, "resolve"},
		{Alert{Kind: FollowUp, Recovered: true, Job: inc.Job, Culprits: inc.Culprits, Category: inc.Category}, "resolve"},
		{Alert{Kind: FollowUp, Job: inc.Job, Culprits: inc.Culprits, Category: inc.Category}, "trigger"},
	} {
		m := decode(t, must(buildPagerDuty(norm(t, c.a), key)))
		if str(t, m, "event_action") != c.want || str(t, m, "dedup_key") != inc.IncidentKey {
			t.Errorf("%+v: %v", c.a, m)
		}
		if _, has := m["payload"]; has != (c.want == "trigger") {
			t.Errorf("%s: payload present %v", c.want, has)
		}
	}
	// Long fields: the summary within 1024, the dedup_key within 255.
	long := strings.Repeat("x", 5000)
	m = decode(t, must(buildPagerDuty(norm(t, Alert{Where: long, Culprits: long, Job: long, IncidentKey: long}), key)))
	if n := utf8.RuneCountInString(str(t, m, "payload", "summary")); n > 1024 {
		t.Errorf("summary of %d characters", n)
	}
	if n := len(str(t, m, "dedup_key")); n > 255 {
		t.Errorf("dedup_key of %d bytes", n)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestGenericJSON(t *testing.T) {
	m := decode(t, must(buildGeneric(norm(t, verdict()))))
	want := map[string]any{
		"level": "error", "title": "Job hung: rank 3 stuck in all_reduce", "kind": "incident", "recovered": false,
		"job": "llama-70b", "host": "node-07", "timestamp": "2025-03-04T05:06:07Z",
		"state": "hung", "category": "straggler", "culprits": "1,4-7", "where": "train.py:123 (step)", "confidence": "high",
		"look_closer": "probing-mcp diagnose --history 42", "history_id": float64(42), "incident_key": "llama-70b|1,4-7|straggler",
		"project": "llama-70b", "run": "node-07", "step": nil,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s: %#v, want %#v", k, got, v)
		}
	}
	if !strings.HasPrefix(m["text"].(string), "The job is hung") {
		t.Errorf("text %q", m["text"])
	}
	if ev := m["evidence"].([]any); len(ev) != 3 || ev[0] != "rank 3: last collective #41, the others #42" {
		t.Errorf("evidence %v", ev)
	}
	if len(m) != len(want)+2 {
		t.Errorf("keys %d, want %d: %v", len(m), len(want)+2, m)
	}
	// No evidence is [], not null (a receiver iterates it).
	if !strings.Contains(string(must(buildGeneric(norm(t, Alert{})))), `"evidence":[]`) {
		t.Error("empty evidence is not []")
	}
}

// TestHostileText: control characters, bidi marks, a megabyte line and a
// Slack mention in the job's text are neutralized in every format.
func TestHostileText(t *testing.T) {
	mb := strings.Repeat("A", 1<<20)
	a := Alert{
		Title:    "hang in \x1b[31mred\x1b[0m",
		Text:     "line one\r\nline\x00two \u202eevil\n<!channel> look",
		Job:      "job\nFAKE: line",
		Where:    "<!channel>.py:1 (<https://evil.example|click>)",
		Evidence: []string{mb, "@everyone [click](https://evil.example) `code` <@123>", "tab\there"},
	}
	n := norm(t, a)
	for _, s := range append([]string{n.Title, n.Job, n.Where}, n.Evidence...) {
		if strings.ContainsAny(s, "\x00\x1b\r\n\t\u202e") {
			t.Errorf("control character kept: %q", s)
		}
	}
	if strings.ContainsAny(n.Text, "\x00\r\u202e") {
		t.Errorf("text keeps a control character: %q", n.Text)
	}
	if len(n.Evidence[0]) > maxEvidLine+len("…") {
		t.Errorf("1 MB evidence line kept at %d bytes", len(n.Evidence[0]))
	}
	slack := string(must(buildSlack(n)))
	for _, bad := range []string{"<!channel>", "<https://evil", "<@123>"} {
		if strings.Contains(slack, bad) {
			t.Errorf("Slack body holds %q raw", bad)
		}
	}
	if !strings.Contains(slack, "&lt;!channel&gt;.py:1") {
		t.Errorf("Slack body does not show the escaped file name: %s", slack)
	}
	var disc discordBody
	if err := json.Unmarshal(must(buildDiscord(n)), &disc); err != nil {
		t.Fatal(err)
	}
	var evField string
	for _, f := range disc.Embeds[0].Fields {
		if f.Name == "Evidence" {
			evField = f.Value
		}
	}
	// Each markdown character shown as itself: no link, mention or code.
	if want := "\n• \\@everyone \\[click\\](https://evil.example) \\`code\\` \\<\\@123\\>\n• tab\\\\there"; !strings.HasSuffix(evField, want) {
		t.Errorf("Discord evidence %q, want the suffix %q", evField, want)
	}
	for name, b := range map[string][]byte{"slack": must(buildSlack(n)), "discord": must(buildDiscord(n)),
		"generic": must(buildGeneric(n)), "pagerduty": must(buildPagerDuty(n, "k"))} {
		if !json.Valid(b) || len(b) > 16<<10 {
			t.Errorf("%s: valid %v, %d bytes", name, json.Valid(b), len(b))
		}
	}
}

func TestTitleCut(t *testing.T) {
	n := norm(t, Alert{Title: strings.Repeat("é", 100)})
	if utf8.RuneCountInString(n.Title) != 63 || !strings.HasSuffix(n.Title, "…") {
		t.Errorf("title %q (%d runes)", n.Title, utf8.RuneCountInString(n.Title))
	}
	if n := norm(t, Alert{Title: strings.Repeat("x", 63)}); n.Title != strings.Repeat("x", 63) {
		t.Errorf("a 63-character title was cut: %q", n.Title)
	}
	for _, bad := range []Alert{{Kind: "page"}, {Level: "fatal"}} {
		if _, err := normalize(bad, t0, nil); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestRedact(t *testing.T) {
	secret := "s3cr3t-t0ken-value"
	n, err := normalize(Alert{Text: "cmd --token " + secret, Evidence: []string{"env PROBING_AUTH_TOKEN=" + secret}, Where: "short"}, t0, []string{secret, "short"[:4]})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(n.Text+n.Evidence[0], secret) || !strings.Contains(n.Text, Redacted) {
		t.Errorf("secret kept: %q %q", n.Text, n.Evidence)
	}
	if n.Where != "short" {
		t.Errorf("a secret under 8 bytes redacted text: %q", n.Where)
	}
}

// FuzzBodies: no input makes a builder panic, produce invalid JSON or
// pass a format's limits.
func FuzzBodies(f *testing.F) {
	f.Add("title", "text\nmore", "a.py:1 (f)", "ev <!channel>", "job", uint8(2), false)
	f.Add(strings.Repeat("\xff", 300), "\x00\u202e", "`*_[]()", strings.Repeat("&<", 2000), "", uint8(0), true)
	f.Fuzz(func(t *testing.T, title, text, where, ev, job string, lvl uint8, recovered bool) {
		a := Alert{Kind: []Kind{Incident, FollowUp, DeadMan, Resolved}[lvl%4], Level: []Level{Info, Warn, Error}[lvl%3],
			Title: title, Text: text, Where: where, Job: job, Host: ev, Culprits: ev, Category: title,
			Evidence: []string{ev, text, where, ev}, LookCloser: ev, Recovered: recovered, HistoryID: int64(lvl)}
		n, err := normalize(a, t0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if utf8.RuneCountInString(n.Title) > maxTitleRunes {
			t.Fatalf("title of %d runes", utf8.RuneCountInString(n.Title))
		}
		for name, build := range map[string]func(Alert) ([]byte, error){
			"slack": buildSlack, "discord": buildDiscord, "generic": buildGeneric,
			"pagerduty": func(a Alert) ([]byte, error) { return buildPagerDuty(a, "key") },
		} {
			b, err := build(n)
			if err != nil || !json.Valid(b) || len(b) > 24<<10 {
				t.Fatalf("%s: err %v, valid %v, %d bytes", name, err, json.Valid(b), len(b))
			}
			switch name {
			case "discord":
				var body discordBody
				if err := json.Unmarshal(b, &body); err != nil {
					t.Fatal(err)
				}
				checkDiscord(t, body)
			case "slack":
				var body slackBody
				if err := json.Unmarshal(b, &body); err != nil {
					t.Fatal(err)
				}
				for _, bl := range body.Blocks {
					texts := append(bl.Fields, bl.Elements...)
					if bl.Text != nil {
						texts = append(texts, *bl.Text)
					}
					for _, tx := range texts {
						if tx.Text == "" || utf8.RuneCountInString(tx.Text) > slackSection {
							t.Fatalf("slack %s text of %d characters", bl.Type, utf8.RuneCountInString(tx.Text))
						}
						if tx.Type == "mrkdwn" && strings.ContainsAny(tx.Text, "<>") {
							t.Fatalf("raw < or > in mrkdwn: %q", tx.Text)
						}
					}
				}
			case "pagerduty":
				var body pdBody
				if err := json.Unmarshal(b, &body); err != nil {
					t.Fatal(err)
				}
				if len(body.DedupKey) > pdDedup || body.Payload != nil && (utf8.RuneCountInString(body.Payload.Summary) > pdSummary || body.Payload.Source == "") {
					t.Fatalf("pagerduty past a limit: %+v", body)
				}
			}
		}
	})
}

func TestLongKeysStayApart(t *testing.T) {
	head := strings.Repeat("j", 1000)
	a, b := norm(t, Alert{Job: head + "a"}), norm(t, Alert{Job: head + "b"})
	if a.IncidentKey == b.IncidentKey || len(a.IncidentKey) > maxKey {
		t.Errorf("keys %q and %q", a.IncidentKey, b.IncidentKey)
	}
	if c := norm(t, Alert{Job: head + "a"}); c.IncidentKey != a.IncidentKey {
		t.Error("the same fields gave another key")
	}
}
