package memt

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestProbingHarness checks the comparison machinery itself, so that it is
// known to work before a MEMT-writing agent supplies real rings: it writes
// the agent's own SQL answer from the fixture (real values: -0.0, 5e-324,
// NUL bytes, non-ASCII, repeated strings) into a small wrapping ring with
// this package's writer (dedup on), and checks that compareRing accepts it
// and rejects each kind of corruption. This is NOT interop evidence: the
// writer and reader here are both ours.
func TestProbingHarness(t *testing.T) {
	exps := agentFixtures(t)
	if len(exps) == 0 {
		t.Fatalf("no agent fixture under %s", fixtureRoot)
	}
	b, err := os.ReadFile(exps[0])
	if err != nil {
		t.Fatal(err)
	}
	var fx interopFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	var exp *interopTable
	for i := range fx.Tables {
		if fx.Tables[i].OrderColumn != "" {
			exp = &fx.Tables[i]
		}
	}
	if exp == nil {
		t.Fatal("fixture has no table with an order column")
	}
	names, _, rows, err := decodeDataFrame(exp.DataFrame)
	if err != nil {
		t.Fatal(err)
	}
	cols := make([]Column, len(names))
	for i, n := range names {
		dt, ok := arrowDType[exp.ArrowTypes[i]]
		if !ok {
			t.Fatalf("column %s: Arrow type %s", n, exp.ArrowTypes[i])
		}
		cols[i] = Column{n, dt}
	}
	path := filepath.Join(t.TempDir(), exp.Schema+"."+exp.Table)
	w, err := Create(path, cols, Options{ChunkSize: 4096, NumChunks: 4, Dedup: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		rb := w.Row()
		for i, c := range cols {
			v := r[i][2:]
			switch c.Type {
			case I64, I32:
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				if c.Type == I64 {
					rb.I64(n)
				} else {
					rb.I32(int32(n))
				}
			case F64:
				bits, err := strconv.ParseUint(v, 16, 64)
				if err != nil {
					t.Fatal(err)
				}
				rb.F64(math.Float64frombits(bits))
			case Str:
				rb.Str(v)
			default:
				t.Fatalf("column %s: dtype %v not handled here", c.Name, c.Type)
			}
		}
		if err := rb.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	lost := int(w.Counters().RowsOverwritten)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if lost == 0 || lost >= len(rows) {
		t.Fatalf("%d of %d rows overwritten: the ring should wrap but keep some", lost, len(rows))
	}
	kept := rows[lost:] // what an agent reading this ring would answer
	self := *exp
	self.Compare, self.RowsAppended = "exact", len(rows)

	if problems, _ := compareRing(path, &self, names, kept, true); len(problems) > 0 {
		t.Fatalf("a faithful ring is rejected:\n%s", strings.Join(problems, "\n"))
	}
	reversed := append([][]string(nil), kept...)
	for i, j := 0, len(reversed)-1; i < j; i, j = i+1, j-1 {
		reversed[i], reversed[j] = reversed[j], reversed[i]
	}
	if problems, notes := compareRing(path, &self, names, reversed, true); len(problems) > 0 || !strings.Contains(strings.Join(notes, " "), "another order") {
		t.Errorf("SQL rows in another order: problems %q, notes %q", problems, notes)
	}

	// "contains" (tables the agent's samplers keep writing): SQL rows that
	// fell off the ring's old end are fine, a changed row is not.
	last := len(names) - 1
	sampled := self
	sampled.Compare = "contains"
	if problems, _ := compareRing(path, &sampled, names, rows[lost-5:len(rows)-5], true); len(problems) > 0 {
		t.Errorf("contains: a faithful ring is rejected: %q", problems)
	}
	tampered := append([][]string(nil), kept...)
	tampered[len(tampered)-1] = append([]string(nil), tampered[len(tampered)-1]...)
	tampered[len(tampered)-1][last] += "!"
	if problems, _ := compareRing(path, &sampled, names, tampered, true); len(problems) == 0 {
		t.Errorf("contains: a changed row was not detected")
	}

	changed := func(f func(e *interopTable, rows [][]string) [][]string) (*interopTable, [][]string) {
		e := self
		e.ArrowTypes = append([]string(nil), self.ArrowTypes...)
		rs := make([][]string, len(kept))
		for i, r := range kept {
			rs[i] = append([]string(nil), r...)
		}
		return &e, f(&e, rs)
	}
	for _, c := range []struct {
		what string
		f    func(e *interopTable, rows [][]string) [][]string
	}{
		{"a changed string", func(e *interopTable, rs [][]string) [][]string { rs[len(rs)/2][last] += "!"; return rs }},
		{"a changed float bit", func(e *interopTable, rs [][]string) [][]string {
			for i, c := range cols {
				if c.Type == F64 {
					rs[3][i] = floatCell(math.Nextafter(math.Float64frombits(mustHex(rs[3][i])), math.Inf(1)))
				}
			}
			return rs
		}},
		{"a missing row", func(e *interopTable, rs [][]string) [][]string { return rs[1:] }},
		{"a wrong Arrow type", func(e *interopTable, rs [][]string) [][]string { e.ArrowTypes[0] = "Float64"; return rs }},
		{"a wrong appended count", func(e *interopTable, rs [][]string) [][]string { e.RowsAppended++; return rs }},
		{"a dead writer expected", nil},
	} {
		e, rs, alive := &self, kept, false
		if c.f != nil {
			e, rs = changed(c.f)
			alive = true
		}
		if problems, _ := compareRing(path, e, names, rs, alive); len(problems) == 0 {
			t.Errorf("%s was not detected", c.what)
		} else {
			t.Logf("%s: detected: %.200s", c.what, problems[0])
		}
	}
}

func mustHex(cell string) uint64 {
	u, err := strconv.ParseUint(strings.TrimPrefix(cell, "f:"), 16, 64)
	if err != nil {
		panic(cell)
	}
	return u
}

// ---------------------------------------------------------------------
// Live agent
