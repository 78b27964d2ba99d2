package agent

import (
	"encoding/json"
	"fmt"

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
