package alert

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigFromEnv(t *testing.T) {
	cfg, err := ConfigFromEnv(env(map[string]string{
		EnvWebhookURL:      "https://hooks.slack.com/services/T0/B0/abc, https://discord.com/api/webhooks/1/tok http://127.0.0.1:9/x",
		EnvWebhookMinLevel: "ERROR",
		EnvPagerDutyKey:    " R0UT1NGKEY0123456789abcdefABCDEF ",
		EnvCooldown:        "30m",
		envAuthToken:       "the-job-token-0123",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.URLs) != 3 || cfg.MinLevel != Error || cfg.PagerDutyRoutingKey != "R0UT1NGKEY0123456789abcdefABCDEF" ||
		cfg.Cooldown != 30*time.Minute || len(cfg.Redact) != 1 || !cfg.Enabled() {
		t.Errorf("config %+v", cfg)
	}
	d := cfg.withDefaults()
	if d.PagerDutyURL != DefaultPagerDutyURL || d.Timeout != 10*time.Second || d.MaxAttempts != 5 || d.QueueSize != 64 {
		t.Errorf("defaults %+v", d)
	}
	for v, want := range map[string]time.Duration{"0": NoCooldown, "0s": NoCooldown, "2h": 2 * time.Hour} {
		cfg, err := ConfigFromEnv(env(map[string]string{EnvCooldown: v}))
		if err != nil || cfg.Cooldown != want {
			t.Errorf("%s=%s: %v, %v", EnvCooldown, v, cfg.Cooldown, err)
		}
	}
	if cfg, err := ConfigFromEnv(env(nil)); err != nil || cfg.Enabled() {
		t.Errorf("empty environment: %+v, %v", cfg, err)
	}
}

// TestConfigErrors: each bad value is named with its fix, and no error
// holds a URL's token or the routing key.
func TestConfigErrors(t *testing.T) {
	const token = "XOXBSECRETTOKEN1234567890"
	for _, c := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{EnvWebhookURL: "http://hooks.slack.com/services/T/B/" + token},
			[]string{EnvWebhookURL + " entry 1", "plain http to hooks.slack.com", "use https://"}},
		{map[string]string{EnvWebhookURL: "https://ok.example/a hooks.slack.com/services/" + token},
			[]string{EnvWebhookURL + " entry 2", "not an absolute URL", "https://host/path"}},
		{map[string]string{EnvWebhookURL: "https://%zz/" + token},
			[]string{EnvWebhookURL + " entry 1", "not a URL"}},
		{map[string]string{EnvWebhookURL: "ftp://files.example/" + token},
			[]string{EnvWebhookURL + " entry 1", `scheme "ftp"`, "want https"}},
		{map[string]string{EnvWebhookURL: "http://10.0.0.1:8080/" + token},
			[]string{"plain http to 10.0.0.1", "loopback"}},
		{map[string]string{EnvWebhookMinLevel: "loud"},
			[]string{EnvWebhookMinLevel, `"loud"`, "want info, warn or error"}},
		{map[string]string{EnvCooldown: "forever"},
			[]string{EnvCooldown, "30m or 1h"}},
		{map[string]string{EnvCooldown: "-1h"},
			[]string{EnvCooldown}},
		{map[string]string{EnvPagerDutyKey: "has space " + token},
			[]string{EnvPagerDutyKey, "one word"}},
		{map[string]string{EnvPagerDutyURL: "https://events.eu.pagerduty.com/v2/enqueue"},
			[]string{EnvPagerDutyURL + " is set but " + EnvPagerDutyKey + " is not"}},
		{map[string]string{EnvPagerDutyKey: "k", EnvPagerDutyURL: "http://events.pagerduty.com/" + token},
			[]string{EnvPagerDutyURL, "plain http"}},
	} {
		_, err := ConfigFromEnv(env(c.env))
		if err == nil {
			t.Errorf("%v: accepted", c.env)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q lacks %q", c.env, err, w)
			}
		}
		if strings.Contains(err.Error(), token) {
			t.Errorf("%v: error holds the secret: %q", c.env, err)
		}
	}
	// Several problems: all of them at once.
	_, err := ConfigFromEnv(env(map[string]string{EnvWebhookMinLevel: "x", EnvCooldown: "y"}))
	if err == nil || !strings.Contains(err.Error(), EnvWebhookMinLevel) || !strings.Contains(err.Error(), EnvCooldown) {
		t.Errorf("both problems not reported: %v", err)
	}
}

func TestFormatOf(t *testing.T) {
	for raw, want := range map[string]format{
		"https://hooks.slack.com/services/T0/B0/x":           fmtSlack,
		"https://HOOKS.SLACK.COM./services/T0/B0/x":          fmtSlack,
		"https://discord.com/api/webhooks/1/tok":             fmtDiscord,
		"https://discordapp.com/api/webhooks/1/tok":          fmtDiscord,
		"https://discord.com/api/v10/webhooks/1/tok":         fmtDiscord,
		"https://canary.discord.com/api/webhooks/1/tok":      fmtDiscord,
		"https://discord.com/channels/1":                     fmtGeneric,
		"https://hooks.slack.com.evil.example/services/x":    fmtGeneric,
		"https://evil.example/hooks.slack.com/services/T0/x": fmtGeneric,
		"http://127.0.0.1:8080/hook":                         fmtGeneric,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := formatOf(u); got != want {
			t.Errorf("%s: %s, want %s", raw, got, want)
		}
	}
	for host, want := range map[string]bool{"127.0.0.1": true, "127.9.9.9": true, "::1": true, "localhost": true,
		"LocalHost.": true, "10.0.0.1": false, "localhost.evil.example": false, "0.0.0.0": false} {
		if loopback(host) != want {
			t.Errorf("loopback(%q) = %v", host, !want)
		}
	}
}
