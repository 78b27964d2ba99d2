package flightrecorder

import (
	"strings"
	"unsafe"
)

// Signatures: what must agree between ranks for a collective to match (op
// type, sizes, dtypes), numbered so that the common comparison of two
// identical entries is one integer compare instead of walking their
// slices. Numbers are exact: two entries get the same number only if their
// signatures are equal.

// sigTable numbers signatures for one load; loads share nothing. Only the
// load's interner uses it, under its lock.
type sigTable struct {
	ids    map[string]uint32
	simple []bool // by id: identical entries of this signature always match
}

func newSigTable() *sigTable { return &sigTable{ids: map[string]uint32{}, simple: []bool{false}} }

// id returns the number of a canonical signature text (never 0).
func (t *sigTable) id(text string, simple bool) (uint32, bool) {
	if id, ok := t.ids[text]; ok {
		return id, t.simple[id]
	}
	id := uint32(len(t.simple))
	t.ids[text] = id
	t.simple = append(t.simple, simple)
	return id, simple
}

func addr[T any](s []T) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(s))) }

// selfConsistentTypes are the op types for which two identical entries
// always match. The gather/scatter numel rules, all_to_all (UNDECIDED) and
// unknown ops are left to the full comparison.
var needsFullMatch = map[string]bool{
	"all_gather": true, "_all_gather_base": true, "all_gather_into_tensor_coalesced": true,
	"reduce_scatter": true, "_reduce_scatter_base": true, "reduce_scatter_tensor_coalesced": true,
	"all_to_all": true, "all_to_all_single": true, "send": true, "recv": true, "coalesced": true,
}

// assign numbers a new Shared's signature (the interner calls it once per
// Shared).
func (t *sigTable) assign(e *Shared) {
	e.sigTab = t
	var b strings.Builder
	b.WriteString(e.ProfilingName)
	b.WriteByte('|')
	b.WriteString(pyList(e.InputSizes))
	b.WriteByte('|')
	b.WriteString(pyList(e.OutputSizes))
	b.WriteByte('|')
	b.WriteString(strings.Join(e.InputDtypes, ","))
	b.WriteByte('|')
	b.WriteString(strings.Join(e.OutputDtypes, ","))
	simple := e.Op != nil && e.Op.Err == "" && !needsFullMatch[e.Op.Type] && setEqual(e.InputDtypes, e.OutputDtypes)
	e.Sig, e.sigSimple = t.id(b.String(), simple)
}
