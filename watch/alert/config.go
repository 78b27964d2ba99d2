package alert

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/netaddr"
)

// The variables ConfigFromEnv reads.
const (
	EnvWebhookURL       = "PROBING_WEBHOOK_URL"
	EnvWebhookMinLevel  = "PROBING_WEBHOOK_MIN_LEVEL"
	EnvPagerDutyKey     = "PROBING_PAGERDUTY_ROUTING_KEY"
	EnvPagerDutyURL     = "PROBING_PAGERDUTY_URL"
	EnvCooldown         = "PROBING_ALERT_COOLDOWN"
	envAuthToken        = "PROBING_AUTH_TOKEN" // redacted from alerts, never read for anything else here
	DefaultPagerDutyURL = "https://events.pagerduty.com/v2/enqueue"
)

// Defaults of the zero Config's fields.
const (
	DefaultMinLevel    = Warn
	DefaultTimeout     = 10 * time.Second // Trackio's
	DefaultCooldown    = time.Hour        // nvrx-watch's
	DefaultMaxAttempts = 5
	DefaultQueueSize   = 64
	DefaultMaxElapsed  = 2 * time.Minute
	// NoCooldown as Config.Cooldown alerts every incident (PROBING_ALERT_COOLDOWN=0).
	NoCooldown time.Duration = -1
)

// Bounds on the settings: a wait past maxRetryAfter is cut to it.
const (
	maxQueue      = 4096
	maxAttempts   = 20
	maxRetryAfter = time.Minute
	backoffBase   = time.Second
	backoffCap    = 30 * time.Second
)

// Config says where alerts go and how hard delivery tries. The zero value
// of a field is its default.
type Config struct {
	// URLs are the webhooks (PROBING_WEBHOOK_URL, comma- or
	// space-separated); the format follows each URL. Secrets: never
	// logged; only scheme://host is.
	URLs []string
	// MinLevel is the lowest level sent (PROBING_WEBHOOK_MIN_LEVEL,
	// default warn), to every sink.
	MinLevel Level
	// PagerDutyRoutingKey sends Events v2 to PagerDutyURL
	// (PROBING_PAGERDUTY_ROUTING_KEY; a secret: never logged, never in
	// another sink's payload).
	PagerDutyRoutingKey string
	// PagerDutyURL (PROBING_PAGERDUTY_URL): default
	// https://events.pagerduty.com/v2/enqueue (the EU service region is
	// https://events.eu.pagerduty.com/v2/enqueue).
	PagerDutyURL string
	// Timeout bounds one attempt (default 10 s, Trackio's).
	Timeout time.Duration
	// Cooldown holds back an incident key alerted within it (default 1 h,
	// nvrx-watch's; PROBING_ALERT_COOLDOWN). NoCooldown: none.
	Cooldown time.Duration
	// MaxAttempts per alert and sink (default 5, at most 20), with jittered
	// exponential backoff from 1 s to 30 s between them.
	MaxAttempts int
	// MaxElapsed bounds one alert's attempts and waits on one sink
	// (default 2 min).
	MaxElapsed time.Duration
	// QueueSize is each sink's queue (default 64, at most 4096); an alert
	// past it is dropped, counted and logged.
	QueueSize int
	// Redact: secrets (8 bytes or more) replaced by [redacted] wherever an
	// alert's text holds them. ConfigFromEnv adds PROBING_AUTH_TOKEN; the
	// routing key and the webhooks' paths and queries are always added.
	Redact []string
	// Now is the cooldown's clock (default time.Now).
	Now func() time.Time
}

// ConfigFromEnv reads the alert variables through getenv. Every problem
// is reported, each naming its variable and the fix; no error ever holds
// a URL's path or query or the routing key.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var cfg Config
	var errs []error
	for _, u := range strings.FieldsFunc(getenv(EnvWebhookURL), func(r rune) bool {
		return r == ',' || r == ' ' || r == '\t' || r == '\n'
	}) {
		cfg.URLs = append(cfg.URLs, u)
	}
	if v := strings.TrimSpace(getenv(EnvWebhookMinLevel)); v != "" {
		l, err := ParseLevel(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", EnvWebhookMinLevel, err))
		}
		cfg.MinLevel = l
	}
	cfg.PagerDutyRoutingKey = strings.TrimSpace(getenv(EnvPagerDutyKey))
	cfg.PagerDutyURL = strings.TrimSpace(getenv(EnvPagerDutyURL))
	if v := strings.TrimSpace(getenv(EnvCooldown)); v != "" {
		d, err := parseCooldown(v)
		if err != nil {
			errs = append(errs, err)
		}
		cfg.Cooldown = d
	}
	if t := getenv(envAuthToken); t != "" {
		cfg.Redact = append(cfg.Redact, t)
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	return cfg, errors.Join(errs...)
}

func parseCooldown(v string) (time.Duration, error) {
	if v == "0" {
		return NoCooldown, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > 7*24*time.Hour {
		return 0, fmt.Errorf("%s=%q: want a duration from 0 (none) to 168h, such as 30m or 1h", EnvCooldown, v)
	}
	if d == 0 {
		return NoCooldown, nil
	}
	return d, nil
}

// Validate checks every sink and setting; each error names the variable
// and the fix, never a URL's path or query or the routing key.
func (c Config) Validate() error {
	var errs []error
	for i, raw := range c.URLs {
		if _, err := checkURL(raw); err != nil {
			errs = append(errs, fmt.Errorf("%s entry %d: %v", EnvWebhookURL, i+1, err))
		}
	}
	if c.MinLevel != "" && c.MinLevel.rank() == 0 {
		errs = append(errs, fmt.Errorf("%s: unknown level: want info, warn or error", EnvWebhookMinLevel))
	}
	if k := c.PagerDutyRoutingKey; k != "" {
		if len(k) > 256 || strings.IndexFunc(k, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
			errs = append(errs, fmt.Errorf("%s: a routing key is one word of printable ASCII (an integration's 32 characters); check the value copied from the service's Events API v2 integration", EnvPagerDutyKey))
		}
	}
	if c.PagerDutyURL != "" {
		if _, err := checkURL(c.PagerDutyURL); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", EnvPagerDutyURL, err))
		}
		if c.PagerDutyRoutingKey == "" {
			errs = append(errs, fmt.Errorf("%s is set but %s is not: set the routing key too, or unset the URL", EnvPagerDutyURL, EnvPagerDutyKey))
		}
	}
	if c.Timeout < 0 || c.MaxElapsed < 0 || c.MaxAttempts < 0 || c.QueueSize < 0 {
		errs = append(errs, errors.New("alert config: Timeout, MaxElapsed, MaxAttempts and QueueSize are 0 (the default) or positive"))
	}
	return errors.Join(errs...)
}

// Enabled says whether any sink is configured.
func (c Config) Enabled() bool { return len(c.URLs) > 0 || c.PagerDutyRoutingKey != "" }

// withDefaults fills the zero fields and bounds the others.
func (c Config) withDefaults() Config {
	if c.MinLevel == "" {
		c.MinLevel = DefaultMinLevel
	}
	if c.PagerDutyURL == "" {
		c.PagerDutyURL = DefaultPagerDutyURL
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Cooldown == 0 {
		c.Cooldown = DefaultCooldown
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	c.MaxAttempts = min(c.MaxAttempts, maxAttempts)
	if c.MaxElapsed <= 0 {
		c.MaxElapsed = DefaultMaxElapsed
	}
	if c.QueueSize <= 0 {
		c.QueueSize = DefaultQueueSize
	}
	c.QueueSize = min(c.QueueSize, maxQueue)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// format is a sink's body format.
type format string

const (
	fmtSlack     format = "slack"
	fmtDiscord   format = "discord"
	fmtGeneric   format = "generic"
	fmtPagerDuty format = "pagerduty"
)

// checkURL parses a webhook URL: https, or http to a loopback address
// only. Its errors hold the scheme and host at most.
func checkURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the whole URL, token included.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("not a URL (%v); write it as https://host/path", err)
	}
	if u.Scheme == "" || u.Host == "" || u.Opaque != "" {
		return nil, errors.New("not an absolute URL; write it as https://host/path")
	}
	host := u.Hostname()
	switch strings.ToLower(u.Scheme) {
	case "https":
	case "http":
		if !loopback(host) {
			return nil, fmt.Errorf("plain http to %s would send the alert and the URL's token unencrypted: use https://, or http only to a loopback address (127.0.0.1, ::1, localhost)", host)
		}
	default:
		return nil, fmt.Errorf("scheme %q: want https (or http to a loopback address)", u.Scheme)
	}
	return u, nil
}

func loopback(host string) bool { return netaddr.Loopback(host) }

// formatOf is the format a webhook URL gets, chosen as Trackio does:
// Slack's incoming-webhook host, Discord's webhook paths, else generic.
func formatOf(u *url.URL) format {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	switch host {
	case "hooks.slack.com":
		return fmtSlack
	case "discord.com", "discordapp.com", "ptb.discord.com", "canary.discord.com":
		if p := u.EscapedPath(); strings.HasPrefix(p, "/api/webhooks/") || strings.HasPrefix(p, "/api/v") && strings.Contains(p, "/webhooks/") {
			return fmtDiscord
		}
	}
	return fmtGeneric
}

// endpoint is what may be logged of u: scheme://host.
func endpoint(u *url.URL) string { return strings.ToLower(u.Scheme) + "://" + u.Host }

// urlSecrets are the parts of a webhook URL that are secrets: its path,
// query and user info (the token lives there).
func urlSecrets(u *url.URL) []string {
	var s []string
	for _, p := range []string{u.EscapedPath(), u.Path, u.RawQuery, u.User.String()} {
		if p != "" && p != "/" {
			s = append(s, p)
		}
	}
	// A token segment, not words such as "services" or "webhooks".
	for _, seg := range strings.Split(u.Path, "/") {
		if len(seg) >= 16 {
			s = append(s, seg)
		}
	}
	return s
}
