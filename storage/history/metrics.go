package history

import (
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// observeWrite records one insert (insert's deferred err) under its
// table, the third word of its INSERT INTO statement.
func observeWrite(query string, start time.Time, err *error) {
	table := ""
	if f := strings.Fields(query); len(f) > 2 {
		table = f[2]
	}
	metrics.HistoryWrite(table, *err != nil, time.Since(start))
}
