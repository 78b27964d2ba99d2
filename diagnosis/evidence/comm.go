// Package evidence gathers what a diagnosis weighs, from the sources that
// hold it (the ring tables, the agents, the dumps), each source's failure
// recorded rather than fatal. It has no MCP imports: the CLI, the tools,
// the skills and the evals read through it alike.
package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// CommRow is one row of python.comm_collective, the agent's record of
// each collective a rank entered (agent/python/.../collectives.py).
type CommRow struct {
	Rank        int
	TimestampUS int64
	Op          string
	// Ranks is participate_ranks: the group's global ranks as a JSON list,
	// "" when unknown.
	Ranks    string
	GroupSeq int64
	// DurationMS is -1 while the call has not returned.
	DurationMS float64
	// Shape ("(4, 3)", a list "[(4, 3), (4, 3)]"), Dtype
	// ("torch.float32") and Bytes describe the tensor(s) it carried; ""
	// and 0 when unknown (record_collective gives only the bytes).
	Shape, Dtype string
	Bytes        int64
	// Peer is the global rank a point-to-point call sent to or received
	// from, -1 for a collective, a receive from any rank, or rings of an
	// agent that records no peer (its P2P rows counted on the group).
	Peer int
}

// UnmarshalJSON reads a row from a node's bundle: a daemon that predates
// the peer column sends none, which means no peer, not rank 0.
func (r *CommRow) UnmarshalJSON(b []byte) error {
	type plain CommRow
	p := plain{Peer: -1}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*r = CommRow(p)
	return nil
}

// P2PPeer is the peer of a point-to-point row that names one, else -1
// (a collective; a receive from any rank; an older agent's row, counted
// on its group).
func (r CommRow) P2PPeer() int {
	if !P2POps[r.Op] || r.Peer < 0 || r.Peer == r.Rank {
		return -1
	}
	return r.Peer
}

// P2POps are the point-to-point calls (batch_isend_irecv is recorded
// as one isend or irecv row per operation).
var P2POps = map[string]bool{"send": true, "recv": true, "isend": true, "irecv": true, "batch_isend_irecv": true}

// MaxCommRows bounds what ReadComm returns, whatever the job's size.
const MaxCommRows = 200000

// ReadComm reads each rank's last perRank collectives from the rings, in
// pages of the engine's row limit. A data dir without the table has no
// rows and no error: a job without torch records none.
func ReadComm(ctx context.Context, e *sqlengine.Engine, perRank int) ([]CommRow, error) {
	return ReadCommFor(ctx, e, perRank, nil)
}

// commWindows are the recent spans tried first: ranking a long job's
// whole ring to keep its last calls costs about a second per million
// rows, while the engine skips the chunks older than a time bound.
var commWindows = []time.Duration{10 * time.Second, 2 * time.Minute, 30 * time.Minute, 6 * time.Hour}

// ReadCommFor is ReadComm for a job whose ranks are known: it reads the
// most recent window in which every one of them has its perRank calls,
// and the whole rings only when none has (a rank that stopped long
// before the others, or rings without identities).
func ReadCommFor(ctx context.Context, e *sqlengine.Engine, perRank int, ranks []int) ([]CommRow, error) {
	if perRank <= 0 {
		perRank = 64
	}
	if len(ranks) > 0 {
		now := time.Now().UnixMicro()
		for _, w := range commWindows {
			out, err := readCommCols(ctx, e, perRank, now-w.Microseconds())
			if err != nil {
				return out, err
			}
			n := map[int]int{}
			for _, r := range out {
				n[r.Rank]++
			}
			full := true
			for _, r := range ranks {
				full = full && n[r] >= perRank
			}
			if full {
				return out, nil
			}
		}
	}
	return readCommCols(ctx, e, perRank, 0)
}

// readCommCols reads with the tensor and peer columns, or without those
// an older agent's rings lack (the peer came last, the tensors before).
func readCommCols(ctx context.Context, e *sqlengine.Engine, perRank int, sinceUS int64) ([]CommRow, error) {
	var out []CommRow
	var err error
	for _, cols := range []commCols{{tensors: true, peer: true}, {tensors: true}, {}} {
		out, err = readComm(ctx, e, perRank, cols, sinceUS)
		var se *sqlengine.Error
		if err == nil || !errors.As(err, &se) || !strings.Contains(se.Msg, "no such column") {
			break
		}
	}
	if err != nil {
		return out, fmt.Errorf("reading python.comm_collective: %w", err)
	}
	return out, nil
}

type commCols struct{ tensors, peer bool }

func readComm(ctx context.Context, e *sqlengine.Engine, perRank int, want commCols, sinceUS int64) ([]CommRow, error) {
	cols := "_rank, timestamp, op, participate_ranks, group_seq, duration_ms"
	if want.tensors {
		cols += ", tensor_shape, tensor_dtype, bytes"
	}
	if want.peer {
		cols += ", peer"
	}
	var out []CommRow
	q := fmt.Sprintf(`SELECT %s FROM (
  SELECT %s,
         row_number() OVER (PARTITION BY _rank ORDER BY timestamp DESC) AS rn
  FROM python.comm_collective WHERE _rank >= 0 AND timestamp >= %d)
WHERE rn <= %d ORDER BY _rank, timestamp`, cols, cols, sinceUS, perRank)
	err := pages(ctx, e, q, func(v []any) {
		r := CommRow{Rank: int(jsonrow.Int(v[0])), TimestampUS: jsonrow.Int(v[1]), Op: jsonrow.String(v[2]),
			Ranks: jsonrow.String(v[3]), GroupSeq: jsonrow.Int(v[4]), DurationMS: jsonrow.Float(v[5]), Peer: -1}
		if want.tensors && len(v) >= 9 {
			r.Shape, r.Dtype, r.Bytes = jsonrow.String(v[6]), jsonrow.String(v[7]), jsonrow.Int(v[8])
		}
		// A ring without the column (an older agent's, beside newer ones)
		// gives NULL: no peer, not rank 0.
		if want.peer && len(v) >= 10 && v[9] != nil {
			if p := jsonrow.Int(v[9]); p >= 0 && p <= MaxWorld {
				r.Peer = int(p)
			}
		}
		out = append(out, r)
	})
	return out, err
}
