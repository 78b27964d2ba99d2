package sqlengine

import (
	"context"
	"database/sql/driver"
	"io"
	"strings"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// MaxScanRows bounds QueryRows: a federated aggregate needs more rows than
// a reader's page (MaxLimit), but never an unbounded number.
const MaxScanRows = 200_000

// Rows is QueryRows' answer: raw cells (cut to the engine's cell cap),
// whether rows were left out, and the same data-quality report as Query.
type Rows struct {
	Columns     []string
	Rows        [][]any
	Truncated   bool
	DataQuality *Quality
}

// queryRows is QueryRows (tracing.go) untraced.
func (e *Engine) queryRows(ctx context.Context, sqlText string, maxRows int) (*Rows, error) {
	if len(sqlText) > MaxSQLBytes {
		return nil, sqlTooLongError(len(sqlText))
	}
	if err := checkStatement(sqlText); err != nil {
		return nil, err
	}
	if maxRows <= 0 || maxRows > MaxScanRows {
		maxRows = MaxScanRows
	}
	ctx, cancel := context.WithTimeout(ctx, e.opt.Timeout)
	defer cancel()
	return withSession(ctx, e, mentionsDocs(sqlText), strings.Contains(strings.ToLower(sqlText), "information_schema"), func(s *session) (*Rows, error) {
		s.sqlText = sqlText
		rows, err := s.conn.QueryContext(ctx, sqlText, nil)
		if err != nil {
			return nil, s.queryError(ctx, e, err)
		}
		defer rows.Close()
		out := &Rows{Columns: uniqueColumns(rows.Columns()), Rows: [][]any{}}
		dest := make([]driver.Value, len(out.Columns))
		cellsCut := 0
		for {
			err := rows.Next(dest)
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, s.queryError(ctx, e, err)
			}
			if len(out.Rows) == maxRows {
				// One row past the cap is enough to know it was cut.
				out.Truncated = true
				break
			}
			vals := make([]any, len(dest))
			for i, v := range dest {
				var cut bool
				vals[i], cut = cell(v, e.opt.MaxCellBytes)
				if cut {
					cellsCut++
				}
			}
			out.Rows = append(out.Rows, vals)
		}
		out.DataQuality = s.quality(cellsCut, e.opt.MaxCellBytes, false)
		return out, nil
	})
}

// CheckReadOnly applies the engine's first checks to SQL that another
// SQLite connection will run (the cluster's federated query): length, one
// statement, a query's first keyword. The errors say how to fix the call.
func CheckReadOnly(sqlText string) error {
	if len(sqlText) > MaxSQLBytes {
		return sqlTooLongError(len(sqlText))
	}
	return checkStatement(sqlText)
}

// Guard is the engine's authorizer for another connection: reads only and
// the audited functions. Install Authorize with RegisterAuthorizer after
// the connection's own setup; after a failed query, Err says what was
// refused, in the engine's words (nil when nothing was).
type Guard struct {
	s session
}

// Authorize is a sqlite3 authorizer callback.
func (g *Guard) Authorize(op int, a1, a2, a3 string) int { return g.s.authorize(op, a1, a2, a3) }

// Err is the refusal, if the guard denied something.
func (g *Guard) Err() error {
	switch {
	case g.s.deniedFunc != "":
		return &Error{Kind: "read_only", Msg: g.s.deniedFunc}
	case g.s.denied != "":
		return &Error{Kind: "read_only", Msg: "read-only SQL engine: " + g.s.denied + " is not allowed; only SELECT, WITH … SELECT, VALUES and EXPLAIN run here"}
	}
	return nil
}

// Install registers the guard on c.
func (g *Guard) Install(c *sqlite3.SQLiteConn) { c.RegisterAuthorizer(g.Authorize) }

// QuoteIdent quotes an SQL identifier.
func QuoteIdent(s string) string { return quoteIdent(s) }
