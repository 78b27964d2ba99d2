package fanout

import (
	"errors"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// observe records one call to a node daemon (Client.Do's deferred err):
// its node, its time, and its failure's kind.
func observe(addr string, start time.Time, err *error) {
	kind := ""
	if *err != nil {
		kind = "other" // Do returns PeerErrors only
		if pe, ok := errors.AsType[*evidence.PeerError](*err); ok {
			kind = pe.Kind
		}
	}
	metrics.FanoutCall(addr, kind, time.Since(start))
}
