package sqlengine

import (
	"errors"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// observeQuery records one query (Query's deferred results): its time,
// the rows it produced, and the Error kind that refused or failed it.
func observeQuery(start time.Time, res **Result, err *error) {
	kind, rows := "", 0
	if *err != nil {
		kind = "sql"
		if e, ok := errors.AsType[*Error](*err); ok {
			kind = e.Kind
		}
	} else if *res != nil {
		rows = (*res).TotalRows
	}
	metrics.SQLQuery(kind, rows, time.Since(start))
}
