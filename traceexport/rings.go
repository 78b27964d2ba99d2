package traceexport

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// Querier runs one read-only statement over a scope's rings
// (evidence.Scope: this node's engine, or the whole job's).
type Querier interface {
	Query(ctx context.Context, sql string, limit int) (*sqlengine.Result, error)
}

// RingRead is what ReadRings found and what it left out.
type RingRead struct {
	Calls []Call
	// Dropped calls were older than the newest max (per range of ranks),
	// all entered at or before DroppedBeforeUS.
	Dropped         int
	DroppedBeforeUS int64
	// DroppedAtLeast: Dropped counts only those seen (the count of the
	// rest was refused).
	DroppedAtLeast bool
	// Notes say what the read could not do (a page of one timestamp,
	// partial data the engine reported).
	Notes []string
}

// maxRanges bounds the statements one read makes: a selection in more
// pieces is read as its hull and filtered here.
const maxRanges = 64

// ReadRings reads the selected ranks' calls from python.comm_collective
// between sinceUS (0: the rings' start) and untilUS, newest first, at
// most max in all (shared among the ranges of ranks by their size), in
// pages that filter on the rank and the time so that a node, or each
// node of the whole job, sends only those rows. A scope without the
// table has no calls and no error.
func ReadRings(ctx context.Context, q Querier, ranks []int, sinceUS, untilUS int64, max int) (RingRead, error) {
	var out RingRead
	if len(ranks) == 0 || max <= 0 {
		return out, nil
	}
	want := map[int]bool{}
	for _, r := range ranks {
		want[r] = true
	}
	rgs := toRanges(ranks)
	filter := false
	if len(rgs) > maxRanges {
		rgs, filter = [][2]int{{ranks[0], ranks[len(ranks)-1]}}, true
	}
	cols := ringCols{tensors: true, peer: true}
	for _, rg := range rgs {
		n := len(ranks)
		if !filter {
			n = rg[1] - rg[0] + 1
		}
		budget := max * n / len(ranks)
		if budget < 1 {
			budget = 1
		}
		var err error
		cols, err = readRange(ctx, q, rg, sinceUS, untilUS, budget, cols, want, &out)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

type ringCols struct{ tensors, peer bool }

func (c ringCols) list() string {
	s := "_rank, _host, timestamp, op, participate_ranks, group_seq, duration_ms"
	if c.tensors {
		s += ", tensor_shape, tensor_dtype, bytes"
	}
	if c.peer {
		s += ", peer"
	}
	return s
}

// older drops the columns an older agent's rings lack, last added first.
func (c ringCols) older() (ringCols, bool) {
	switch {
	case c.peer:
		return ringCols{tensors: true}, true
	case c.tensors:
		return ringCols{}, true
	}
	return c, false
}

// firstWindow is the span the first page of a range asks for; later
// windows follow the rate the pages found.
const firstWindow = 10 * 1000 * 1000 // µs

// readRange pages one range of ranks, newest first, each page a window
// of time: over the whole job every statement copies the rows its filter
// selects from every node, so a page never asks for the whole past. A
// full page moves the window's top to its oldest row (those of that
// microsecond already read are skipped: a page boundary may split them)
// and sizes the next window by the span the page covered; a window not
// full was read whole, and the next one, below it, is four times wider,
// until the start of the window asked for (or of time).
func readRange(ctx context.Context, q Querier, rg [2]int, sinceUS, untilUS int64, budget int, cols ringCols, want map[int]bool, out *RingRead) (ringCols, error) {
	upper, width := untilUS, int64(firstWindow)
	seen := map[string]bool{} // the rows of the boundary microsecond
	got, dropped := 0, 0
	for {
		lower := max(sinceUS, upper-width)
		sql := fmt.Sprintf("SELECT %s FROM python.comm_collective WHERE _rank >= %d AND _rank <= %d AND timestamp >= %d AND timestamp <= %d ORDER BY timestamp DESC LIMIT %d",
			cols.list(), rg[0], rg[1], lower, upper, sqlengine.MaxLimit)
		res, err := q.Query(ctx, sql, sqlengine.MaxLimit)
		var se *sqlengine.Error
		if err != nil && errors.As(err, &se) && strings.Contains(se.Msg, "no such column") {
			if older, ok := cols.older(); ok {
				cols = older
				continue
			}
		}
		if err != nil {
			if errors.As(err, &se) && (strings.Contains(se.Msg, "no such table") || se.Kind == "no_table") {
				return cols, nil
			}
			return cols, fmt.Errorf("reading python.comm_collective for ranks %d-%d: %w", rg[0], rg[1], err)
		}
		if res.DataQuality != nil && res.DataQuality.Partial && len(out.Notes) < 8 {
			out.Notes = append(out.Notes, fmt.Sprintf("ranks %d-%d: some ring data could not be read (%d problem(s)); the trace may miss calls", rg[0], rg[1], len(res.DataQuality.Problems)+res.DataQuality.ProblemsOmitted))
		}
		if res.DataQuality != nil && len(res.DataQuality.NodesFailed) > 0 && len(out.Notes) < 8 {
			out.Notes = append(out.Notes, fmt.Sprintf("node(s) that did not answer: %s; their ranks have no calls here", strings.Join(res.DataQuality.NodesFailed, ", ")))
		}
		oldest := int64(-1)
		fresh := 0
		nextSeen := map[string]bool{}
		for _, row := range res.Rows {
			v := row.Values()
			c, key := ringCall(v, cols)
			if c.StartUS == upper && seen[key] {
				continue
			}
			if oldest < 0 || c.StartUS < oldest {
				oldest = c.StartUS
				clear(nextSeen)
			}
			if c.StartUS == oldest {
				nextSeen[key] = true
			}
			fresh++
			if !want[c.Rank] {
				continue
			}
			if got == budget {
				dropped++
				out.Dropped++
				out.DroppedBeforeUS = max(out.DroppedBeforeUS, c.StartUS)
				continue
			}
			out.Calls = append(out.Calls, c)
			got++
		}
		if got == budget && dropped > 0 {
			// The cap is reached and older calls exist: say how many more
			// there are without reading them all (at least those seen,
			// when the count is refused: a whole job's count copies them).
			if rest, err := countOlder(ctx, q, rg, sinceUS, oldest); err == nil {
				out.Dropped += rest
			} else {
				out.DroppedAtLeast = true
			}
			return cols, nil
		}
		if err := ctx.Err(); err != nil {
			return cols, err
		}
		if len(res.Rows) < sqlengine.MaxLimit {
			// The window was read whole: the next one lies below it.
			if lower <= sinceUS || lower <= 0 {
				return cols, nil
			}
			upper, width = lower-1, width*4
			clear(seen)
			continue
		}
		if fresh == 0 {
			out.Notes = append(out.Notes, fmt.Sprintf("ranks %d-%d: more than %d calls entered in one microsecond (%d µs); the older ones are left out", rg[0], rg[1], sqlengine.MaxLimit, upper))
			return cols, nil
		}
		if oldest == upper {
			for k := range nextSeen {
				seen[k] = true
			}
		} else {
			seen = nextSeen
		}
		// The next page is expected within the span this one covered.
		width = max(upper-oldest+(upper-oldest)/4, 1000)
		upper = oldest
	}
}

// countOlder counts the calls of a range entered before us (the rings
// without a row there count 0).
func countOlder(ctx context.Context, q Querier, rg [2]int, sinceUS, us int64) (int, error) {
	res, err := q.Query(ctx, fmt.Sprintf("SELECT count(*) AS n FROM python.comm_collective WHERE _rank >= %d AND _rank <= %d AND timestamp >= %d AND timestamp < %d", rg[0], rg[1], sinceUS, us), 1)
	if err != nil || len(res.Rows) == 0 {
		return 0, err
	}
	v := res.Rows[0].Values()
	if len(v) == 0 {
		return 0, nil
	}
	return int(jsonrow.Int(v[0])), nil
}

// ringCall reads one row (cols' order) and a key that tells the rows of
// one microsecond apart.
func ringCall(v []any, cols ringCols) (Call, string) {
	c := Call{Rank: int(jsonrow.Int(v[0])), Host: jsonrow.String(v[1]), StartUS: jsonrow.Int(v[2]), Op: jsonrow.String(v[3]),
		Seq: jsonrow.Int(v[5]), Peer: -1, Source: "comm_rings"}
	raw := jsonrow.String(v[4])
	// A group is named by its members (group_ranks); a member list that
	// does not read as ranks is shown as written.
	if c.Members = membersOf(raw); c.Members == "" {
		c.Group = raw
	}
	dur := jsonrow.Float(v[6])
	c.DurUS = dur * 1000
	if dur < 0 {
		c.DurUS = -1
	}
	i := 7
	if cols.tensors && len(v) >= i+3 {
		c.Shape, c.Dtype, c.Bytes = jsonrow.String(v[i]), jsonrow.String(v[i+1]), jsonrow.Int(v[i+2])
		i += 3
	}
	if cols.peer && len(v) > i && v[i] != nil {
		if p := jsonrow.Int(v[i]); p >= 0 && p <= evidence.MaxWorld {
			c.Peer = int(p)
		}
	}
	c.P2P = evidence.P2POps[c.Op]
	if c.Peer == c.Rank {
		c.Peer = -1
	}
	key := fmt.Sprint(c.Rank, "|", c.Op, "|", raw, "|", c.Seq, "|", c.Peer, "|", dur)
	return c, key
}

// membersOf reads participate_ranks ("[0, 1, 2, 3]") as a rank set
// ("0-3"), "" when it is not a list of ranks.
func membersOf(raw string) string {
	s := strings.TrimSpace(raw)
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' || len(s) > 1<<20 {
		return ""
	}
	var rs []int
	for _, f := range strings.Split(s[1:len(s)-1], ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > evidence.MaxWorld {
			return ""
		}
		rs = append(rs, n)
	}
	if len(rs) == 0 {
		return ""
	}
	return rankset.Format(rs)
}

// toRanges is sorted ranks as closed ranges.
func toRanges(ranks []int) [][2]int {
	var out [][2]int
	for _, r := range ranks {
		if n := len(out); n > 0 && out[n-1][1]+1 == r {
			out[n-1][1] = r
			continue
		}
		out = append(out, [2]int{r, r})
	}
	return out
}
