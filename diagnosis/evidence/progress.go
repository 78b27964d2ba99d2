package evidence

import (
	"context"
	"errors"
	"fmt"

	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// RankActivity is what the rings say about one rank's progress, in its
// own clock's microseconds.
type RankActivity struct {
	Rank int
	// Steps are its last step completions (python.torch_step_timing),
	// oldest first.
	Steps []int64
	// LastComm is when it last entered a collective, and LastCommDone when
	// one it entered last returned (0: none).
	LastComm, LastCommDone int64
}

// ReadActivity reads every rank's recent steps and its last collective
// activity. Missing tables give no activity, not an error.
func ReadActivity(ctx context.Context, e *sqlengine.Engine, steps int) (map[int]*RankActivity, error) {
	out, err := readSteps(ctx, e, steps)
	errs := []error{err}
	q := `SELECT _rank, max(timestamp), max(CASE WHEN duration_ms >= 0 THEN timestamp + CAST(duration_ms * 1000 AS INTEGER) END)
FROM python.comm_collective WHERE _rank >= 0 GROUP BY _rank ORDER BY _rank`
	if err := pages(ctx, e, q, func(v []any) {
		a := activityOf(out, int(jsonrow.Int(v[0])))
		a.LastComm, a.LastCommDone = jsonrow.Int(v[1]), jsonrow.Int(v[2])
	}); err != nil {
		errs = append(errs, fmt.Errorf("reading python.comm_collective: %w", err))
	}
	return out, errors.Join(errs...)
}

// activityFromComm sets each rank's last collective activity from its
// last calls (ReadComm's rows hold them), sparing a scan of the whole
// comm ring.
func activityFromComm(acts map[int]*RankActivity, rows []CommRow) {
	for _, r := range rows {
		a := activityOf(acts, r.Rank)
		a.LastComm = max(a.LastComm, r.TimestampUS)
		if r.DurationMS >= 0 {
			a.LastCommDone = max(a.LastCommDone, r.TimestampUS+int64(r.DurationMS*1000))
		}
	}
}

// activityOf is rank r's entry in m, made when absent.
func activityOf(m map[int]*RankActivity, r int) *RankActivity {
	a := m[r]
	if a == nil {
		a = &RankActivity{Rank: r}
		m[r] = a
	}
	return a
}

// readSteps reads every rank's last step completions.
func readSteps(ctx context.Context, e *sqlengine.Engine, steps int) (map[int]*RankActivity, error) {
	if steps <= 0 {
		steps = 10
	}
	out := map[int]*RankActivity{}
	var errs []error
	q := fmt.Sprintf(`SELECT _rank, timestamp FROM (
  SELECT _rank, timestamp, row_number() OVER (PARTITION BY _rank ORDER BY timestamp DESC) AS rn
  FROM python.torch_step_timing WHERE _rank >= 0)
WHERE rn <= %d ORDER BY _rank, timestamp`, steps)
	if err := pages(ctx, e, q, func(v []any) {
		a := activityOf(out, int(jsonrow.Int(v[0])))
		a.Steps = append(a.Steps, jsonrow.Int(v[1]))
	}); err != nil {
		errs = append(errs, fmt.Errorf("reading python.torch_step_timing: %w", err))
	}
	return out, errors.Join(errs...)
}

// pages runs q (which must not end in LIMIT) page by page, up to
// MaxCommRows rows; a table that does not exist gives no rows.
func pages(ctx context.Context, e *sqlengine.Engine, q string, row func([]any)) error {
	for offset := 0; offset < MaxCommRows; offset += sqlengine.MaxLimit {
		res, err := e.Query(ctx, fmt.Sprintf("%s LIMIT %d OFFSET %d", q, sqlengine.MaxLimit, offset), sqlengine.MaxLimit)
		if err != nil {
			if noTable(err) {
				return nil
			}
			return err
		}
		for _, r := range res.Rows {
			row(r.Values())
		}
		if len(res.Rows) < sqlengine.MaxLimit {
			return nil
		}
	}
	return fmt.Errorf("more than %d rows; the rest left out", MaxCommRows)
}
