package agent

import (
	"errors"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// observeCall records one request to an agent (Client.Do's deferred err):
// its time and, when it failed, the Error's kind.
func observeCall(start time.Time, err *error) {
	kind := ""
	if *err != nil {
		kind = "other"
		if ae, ok := errors.AsType[*Error](*err); ok {
			kind = ae.Kind
		}
	}
	metrics.AgentCall(kind, time.Since(start))
}
