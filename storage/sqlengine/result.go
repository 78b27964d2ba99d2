package sqlengine

import (
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/storage"
	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
)

// Result is Probing's QueryJSON shape plus a data-quality section.
type Result struct {
	Columns []string `json:"columns"`
	// Rows are objects keyed by column, keys in column order.
	Rows      []Row `json:"rows"`
	RowCount  int   `json:"row_count"`
	TotalRows int   `json:"total_rows"`
	// TotalRowsLowerBound: counting the rows past the limit hit the time
	// limit, so total_rows is how many were counted, not all.
	TotalRowsLowerBound bool     `json:"total_rows_lower_bound,omitempty"`
	Truncated           bool     `json:"truncated"`
	DataQuality         *Quality `json:"data_quality,omitempty"`
}

// Row is one result row: an object keyed by column, in column order.
type Row = jsonrow.Row

// Quality says what the answer may be missing or where it came from.
type Quality struct {
	// Partial: some recorded data could not be read; Problems say which.
	Partial  bool              `json:"partial"`
	Problems []storage.Problem `json:"problems,omitempty"`
	// ProblemsOmitted counts problems beyond the ones listed.
	ProblemsOmitted int `json:"problems_omitted,omitempty"`
	RingsRead       int `json:"rings_read,omitempty"`
	// DeadWriterPIDs: rings read whose writing process has exited (a dead
	// job's data: complete up to its death, nothing newer will come).
	DeadWriterPIDs string `json:"dead_writer_pids,omitempty"`
	// RowsOverwritten: rows the rings read had already recycled; the
	// oldest history is gone, so counts and minimums over time are
	// lower bounds.
	RowsOverwritten int64    `json:"rows_overwritten,omitempty"`
	ChunksTorn      int      `json:"chunks_torn,omitempty"`
	ChunksInvalid   int      `json:"chunks_invalid,omitempty"`
	InvalidUTF8     int      `json:"invalid_utf8_values,omitempty"`
	CellsCut        int      `json:"cells_cut,omitempty"`
	Notes           []string `json:"notes,omitempty"`
	// NodesAsked and NodesFailed are a whole-job query's nodes: how many
	// were asked, and the addresses of those that did not answer (at
	// most 50, then how many more).
	NodesAsked  int      `json:"nodes_asked,omitempty"`
	NodesFailed []string `json:"nodes_failed,omitempty"`
}

const maxProblems = 20

func (s *session) quality(cellsCut, maxCell int, countCut bool) *Quality {
	q := &Quality{CellsCut: cellsCut}
	s.q.mu.Lock()
	st := s.q.stats
	problems := append(append(append([]storage.Problem{}, s.inv.Problems...), s.skipped...), s.q.failures...)
	read := s.q.read
	s.q.mu.Unlock()
	q.ChunksTorn, q.ChunksInvalid, q.InvalidUTF8 = st.Torn, st.Invalid, st.BadUTF8
	var dead []int
	seenDead := map[int]bool{}
	for _, src := range s.sources {
		for _, f := range src.files {
			if !read[f.ring.Path] {
				continue
			}
			q.RingsRead++
			q.RowsOverwritten += int64(f.ring.Counters.RowsOverwritten)
			if !f.ring.WriterAlive && !seenDead[f.ring.PID] {
				seenDead[f.ring.PID] = true
				dead = append(dead, f.ring.PID)
			}
		}
	}
	sort.Ints(dead)
	if len(dead) > 0 {
		q.DeadWriterPIDs = rankset.Format(dead)
	}
	if len(problems) > maxProblems {
		q.ProblemsOmitted = len(problems) - maxProblems
		problems = problems[:maxProblems]
	}
	q.Problems = problems
	q.Partial = len(problems) > 0 || st.Invalid > 0 || len(s.q.failures) > 0
	if st.Torn > 0 {
		q.Notes = append(q.Notes, fmt.Sprintf("%d chunk(s) were recycled by the live writer while being read and were skipped; rerun for the newest rows", st.Torn))
	}
	if cellsCut > 0 {
		q.Notes = append(q.Notes, fmt.Sprintf("%d cell(s) longer than %d bytes were cut; select substr(col, N, M) for the rest", cellsCut, maxCell))
	}
	if countCut {
		q.Notes = append(q.Notes, "counting the rows past the limit hit the time limit: total_rows is a lower bound")
	}
	if s.inv.NetworkFS && q.RingsRead > 0 {
		q.Notes = append(q.Notes, fmt.Sprintf("the data dir is on %s, a network file system: rings written on another host may read stale; query on the node that runs the job", s.inv.FS))
	}
	if s.inv.Missing {
		q.Notes = append(q.Notes, fmt.Sprintf("data dir %s does not exist: no agent has recorded anything here (set PROBING_DATA_DIR?)", s.inv.Base))
	}
	if !q.Partial && q.DeadWriterPIDs == "" && q.RowsOverwritten == 0 && st.Torn == 0 && st.BadUTF8 == 0 && cellsCut == 0 && len(q.Notes) == 0 {
		return nil
	}
	return q
}

// cell converts a SQLite value for JSON, cutting long text and blobs.
func cell(v any, max int) (any, bool) {
	switch x := v.(type) {
	case nil, int64, bool:
		return x, false
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Sprint(x), false // JSON has no NaN or Inf
		}
		return x, false
	case string:
		if len(x) > max {
			n := max
			for n > 0 && !utf8.RuneStart(x[n]) {
				n--
			}
			return fmt.Sprintf("%s…[%d more bytes]", strings.ToValidUTF8(x[:n], "\uFFFD"), len(x)-n), true
		}
		return x, false
	case []byte:
		// Blobs as hex: base64 means nothing to a reader.
		if 2*len(x) > max {
			return fmt.Sprintf("x'%s'…[%d bytes]", hex.EncodeToString(x[:max/2]), len(x)), true
		}
		return "x'" + hex.EncodeToString(x) + "'", false
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano), false
	}
	return fmt.Sprint(v), false
}

// uniqueColumns renames repeated result column names (SELECT a, a), which
// would otherwise collide as object keys.
func uniqueColumns(cols []string) []string {
	out := make([]string, len(cols))
	seen := map[string]int{}
	for i, c := range cols {
		seen[c]++
		name := c
		for n := seen[c]; n > 1; n++ {
			name = fmt.Sprintf("%s_%d", c, n)
			if seen[name] == 0 {
				seen[name] = 1
				break
			}
		}
		out[i] = name
	}
	return out
}
