package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Config returns one key's value (key given) or every key (key empty).
// Keys are each agent's own: ours "probing."-prefixed (the prefix is
// optional), the original Probing agent's as it names them
// (probingConfig: "server.address", "probing.server.timeout").
func Config(ctx context.Context, a *Agent, key string) (map[string]string, error) {
	c, err := NewClient(a)
	if err != nil {
		return nil, err
	}
	if a.Kind == KindProbing {
		// Probing's own key names, not ours (probingConfig).
		return probingConfig(ctx, c, strings.TrimSpace(key))
	}
	if key == "" {
		out := map[string]string{}
		return out, c.GetJSON(ctx, "/config", &out)
	}
	key = normalizeKey(key)
	b, err := c.Do(ctx, http.MethodGet, "/config/"+url.PathEscape(key), nil, "")
	if err != nil {
		return nil, err
	}
	return map[string]string{key: string(b)}, nil
}

// ConfigKey describes one settable key.
type ConfigKey struct {
	Key      string `json:"key"`
	Value    string `json:"value"`
	Doc      string `json:"doc"`
	Settable bool   `json:"settable"`
}

// ConfigKeys lists our agent's keys with their docs.
func ConfigKeys(ctx context.Context, a *Agent) ([]ConfigKey, error) {
	c, err := NewClient(a)
	if err != nil {
		return nil, err
	}
	var out []ConfigKey
	return out, c.GetJSON(ctx, "/config/_keys", &out)
}

// SetResult is the agent's answer to a config write.
type SetResult struct {
	Status   string  `json:"status"`
	Key      string  `json:"key"`
	Value    string  `json:"value"`
	Previous *string `json:"previous"`
}

// SetConfig writes one key in the process.
func SetConfig(ctx context.Context, a *Agent, key, value string) (*SetResult, error) {
	if a.Kind != KindOurs {
		return nil, fmt.Errorf("pid %d runs the original Probing agent: set its config with its own tools", a.PID)
	}
	c, err := NewClient(a)
	if err != nil {
		return nil, err
	}
	b, err := c.Do(ctx, http.MethodPut, "/config/"+url.PathEscape(normalizeKey(key)), []byte(value), "text/plain")
	if err != nil {
		return nil, err
	}
	var r SetResult
	return &r, c.decode(b, &r)
}

func normalizeKey(k string) string {
	k = strings.TrimSpace(k)
	if !strings.HasPrefix(k, "probing.") && !strings.HasPrefix(k, "_") {
		k = "probing." + k
	}
	return k
}

// EvalResult is the agent's answer to eval.
type EvalResult struct {
	Status     string   `json:"status"` // ok, error, timeout
	Output     string   `json:"output"`
	Traceback  []string `json:"traceback"`
	DurationMS float64  `json:"duration_ms"`
}

// MaxEvalCode is the most source the agent takes in one eval (its request
// body limit, agent/PROTOCOL.md).
const MaxEvalCode = 4 << 20

// evalBySwitchSince is the first agent version that serves eval on its
// control socket unless the job opts out (PROBING_ALLOW_EVAL=0): from it on
// the server's PROBING_MCP_ALLOW_WRITE is the switch. Older agents serve
// eval only when the job started with PROBING_ALLOW_EVAL=1.
const evalBySwitchSince = "0.2.0"

// EvalRefusal says why our agent in a will not run eval, from its identity
// and before any call, or "" when it will (or cannot tell: the original
// Probing agent, no identity). eval_allowed means "served on the control
// socket"; an older agent's false means PROBING_ALLOW_EVAL=1 was missing.
// The text follows "pid N: ".
func EvalRefusal(a *Agent) string {
	if a.Kind != KindOurs || a.Identity == nil || a.Identity.EvalAllowed {
		return ""
	}
	if v := a.Identity.AgentVersion; versionBefore(v, evalBySwitchSince) {
		return fmt.Sprintf("its agent (probing-mcp %s) serves eval only in a job started with PROBING_ALLOW_EVAL=1; "+
			"restart this job with PROBING_ALLOW_EVAL=1, or run `probing-mcp agent install` so that jobs started from now on "+
			"get agent %s or later, where this server's PROBING_MCP_ALLOW_WRITE is enough", v, evalBySwitchSince)
	}
	return "its job opted out of eval with PROBING_ALLOW_EVAL set to 0/false/off/no (or to a value the agent does not " +
		"recognise, which counts as off); restart the job without PROBING_ALLOW_EVAL to allow eval"
}

// versionBefore compares dotted numeric versions ("0.1.0" < "0.2.0"); a
// version it cannot read is not before anything.
func versionBefore(v, than string) bool {
	parse := func(s string) ([3]int, bool) {
		var n [3]int
		parts := strings.Split(strings.TrimSpace(s), ".")
		if len(parts) == 0 || len(parts) > 3 {
			return n, false
		}
		for i, p := range parts {
			x, err := strconv.Atoi(p)
			if err != nil || x < 0 {
				return n, false
			}
			n[i] = x
		}
		return n, true
	}
	a, ok1 := parse(v)
	b, ok2 := parse(than)
	if !ok1 || !ok2 {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// Eval runs code inside the process, over its control socket (the agent
// checks that the peer is the job's user or root). An agent whose identity
// says it will refuse is not called (EvalRefusal). The agent enforces
// timeout; the call's own deadline is that plus a margin, so a wedged
// process still gives a clear error in bounded time.
func Eval(ctx context.Context, a *Agent, code string, timeout time.Duration) (*EvalResult, error) {
	if len(code) > MaxEvalCode {
		return nil, &Error{PID: a.PID, Kind: "denied", Msg: fmt.Sprintf("code is %d bytes; the agent takes at most %d (4 MiB)", len(code), MaxEvalCode)}
	}
	if why := EvalRefusal(a); why != "" {
		return nil, &Error{PID: a.PID, Kind: "denied", Msg: why}
	}
	c, err := NewClient(a)
	if err != nil {
		return nil, err
	}
	secs := int(timeout.Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+3*time.Second)
	defer cancel()
	b, err := c.Do(ctx, http.MethodPost, fmt.Sprintf("/apis/pythonext/eval?timeout=%d", secs), []byte(code), "text/plain")
	if err != nil {
		return nil, err
	}
	var r EvalResult
	return &r, c.decode(b, &r)
}

// Snapshot is one rank's Flight Recorder dump, as the agent returned it.
type Snapshot struct {
	OK             bool   `json:"ok"`
	Rank           int    `json:"rank"`
	WorldSize      int    `json:"world_size"`
	Records        int    `json:"records"`
	ProcessGroups  int    `json:"process_groups"`
	SnapshotID     int64  `json:"snapshot_id"`
	Version        string `json:"version"`
	CommLibVersion string `json:"comm_lib_version"`
	Format         string `json:"format"`
	DumpFunction   string `json:"dump_function"`
	Bytes          int    `json:"bytes"`
	DataB64        string `json:"data_b64"`
	Data           []byte `json:"-"`
}

// MaxSnapshotBytes caps one rank's dump (a 2000-entry ring with stacks is
// a few MiB).
const MaxSnapshotBytes = 64 << 20

// SnapshotFlightRecorder asks the process for its Flight Recorder dump
// (raw bytes included) and has it persist the rows into its rings.
func SnapshotFlightRecorder(ctx context.Context, a *Agent, onlyActive, stacks bool) (*Snapshot, error) {
	c, err := NewClient(a)
	if err != nil {
		return nil, err
	}
	c.MaxReply = MaxSnapshotBytes*4/3 + 1<<20
	q := url.Values{"include_stack_traces": {fmt.Sprint(stacks)}, "only_active": {fmt.Sprint(onlyActive)},
		"persist": {"true"}, "format": {"pickle"}, "raw": {"1"}}
	b, err := c.Do(ctx, http.MethodGet, "/apis/pythonext/flight-recorder/snapshot?"+q.Encode(), nil, "")
	if err != nil {
		return nil, err
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, &Error{PID: a.PID, Kind: "malformed", Msg: fmt.Sprintf("snapshot reply is not JSON: %v", err)}
	}
	if !s.OK {
		return nil, &Error{PID: a.PID, Kind: "http", Msg: "snapshot failed: " + errorText(b)}
	}
	if s.DataB64 == "" {
		return nil, &Error{PID: a.PID, Kind: "malformed", Msg: "snapshot reply has no data_b64 (an agent that does not support raw=1?)"}
	}
	if s.Data, err = base64.StdEncoding.DecodeString(s.DataB64); err != nil {
		return nil, &Error{PID: a.PID, Kind: "malformed", Msg: "snapshot data_b64 is not base64: " + err.Error()}
	}
	s.DataB64 = ""
	return &s, nil
}
