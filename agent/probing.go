package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/probing-mcp/probing-mcp/diag/stacks"
)

// parseProbingCallstack reads the original Probing agent's
// /apis/pythonext/callstack reply: externally tagged frames, innermost
// first, of the main thread only (contract §2.8).
func parseProbingCallstack(b []byte) (*stacks.Process, error) {
	var frames []map[string]json.RawMessage
	if err := json.Unmarshal(b, &frames); err != nil {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("the Probing agent says: %s", e.Error)
		}
		return nil, fmt.Errorf("callstack reply is not a frame list: %v", err)
	}
	t := stacks.Thread{Name: "MainThread", IsMain: true, Frames: []stacks.Frame{}}
	for _, f := range frames {
		if raw, ok := f["PyFrame"]; ok {
			var py struct {
				File   string `json:"file"`
				Func   string `json:"func"`
				Lineno int    `json:"lineno"`
			}
			if json.Unmarshal(raw, &py) == nil {
				t.Frames = append(t.Frames, stacks.Frame{File: py.File, Line: py.Lineno, Function: py.Func})
			}
			continue
		}
		if raw, ok := f["CFrame"]; ok {
			var c struct {
				File   string `json:"file"`
				Func   string `json:"func"`
				Lineno int    `json:"lineno"`
			}
			if json.Unmarshal(raw, &c) == nil {
				t.Frames = append(t.Frames, stacks.Frame{File: c.File, Line: c.Lineno, Function: "[native] " + c.Func})
			}
		}
	}
	return &stacks.Process{Threads: []stacks.Thread{t}}, nil
}

// probingConfig reads the original agent's probing.* settings through its
// SQL endpoint (it serves no config listing, and GET /config/<key> knows
// only some keys): information_schema.df_settings, in Probing's query
// envelope and DataFrame encoding (contract §2.4). Secrets are redacted.
func probingConfig(ctx context.Context, c *Client, key string) (map[string]string, error) {
	body, _ := json.Marshal(map[string]any{
		"version": map[string]int{"major": 0, "minor": 1, "patch": 0}, "message_id": nil, "timestamp": 0,
		"payload": map[string]any{"expr": "SELECT name, value FROM information_schema.df_settings WHERE name LIKE 'probing.%'", "opts": nil},
	})
	b, err := c.Do(ctx, "POST", "/query", body, "application/json")
	if err != nil {
		return nil, err
	}
	var msg struct {
		Payload struct {
			DataFrame *struct {
				Names []string                     `json:"names"`
				Cols  []map[string]json.RawMessage `json:"cols"`
			} `json:"DataFrame"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(b, &msg); err != nil || msg.Payload.DataFrame == nil || len(msg.Payload.DataFrame.Cols) != 2 {
		return nil, &Error{PID: c.PID, Kind: "malformed", Msg: fmt.Sprintf("the Probing agent's /query reply is not a two-column DataFrame: %.200q", b)}
	}
	var names, values []string
	if err := json.Unmarshal(msg.Payload.DataFrame.Cols[0]["SeqText"], &names); err != nil {
		return nil, &Error{PID: c.PID, Kind: "malformed", Msg: "config names are not text"}
	}
	if err := json.Unmarshal(msg.Payload.DataFrame.Cols[1]["SeqText"], &values); err != nil || len(values) != len(names) {
		return nil, &Error{PID: c.PID, Kind: "malformed", Msg: "config values are not text of the names' length"}
	}
	out := map[string]string{}
	for i, n := range names {
		if key != "" && n != key {
			continue
		}
		v := values[i]
		if strings.Contains(n, "token") || strings.Contains(n, "secret") || strings.Contains(n, "password") {
			v = "<redacted>"
		}
		out[n] = v
	}
	if key != "" && len(out) == 0 {
		return nil, &Error{PID: c.PID, Kind: "http", Status: 404, Msg: fmt.Sprintf("the Probing agent has no config key %s", key)}
	}
	return out, nil
}
