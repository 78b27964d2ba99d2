// Package flightrecorder decodes PyTorch Flight Recorder dumps and finds why
// a distributed job hung: which process group, which collective, which ranks.
//
// It has two analyses. Parity (parity.go) replays torch's own analyzer,
// fr_trace, decision for decision, so that its verdicts and log blocks can be
// quoted. Analyze (analyze.go) reuses the same matching rules but aligns
// ranks per process group, pairs point-to-point ops per peer, tolerates
// missing dumps and version skew, and adds what fr_trace ignores: pg_status
// progress counters, entry states, timestamps and timeouts.
//
// Nothing here imports MCP: the CLI, the MCP tools and the skills share it.
package flightrecorder

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// Dump is one rank's Flight Recorder snapshot.
type Dump struct {
	Path           string
	Rank           int
	Format         string // "pickle" or "json"
	Version        string
	Major, Minor   int
	CommLibVersion string
	PGConfig       []PGConfig // in dump order
	PGStatus       []PGStatus // in dump order
	Entries        []Entry    // in record order
	HasEntries     bool       // the dump had an "entries" key
	Warnings       []string   // non-fatal oddities found while decoding
	// noGroup counts the entries without a process_group: they are not
	// kept, and Parity aborts on them as fr_trace does.
	noGroup int
}

// PGConfig is one process group as a rank registered it.
type PGConfig struct {
	Name  string
	Desc  string
	Ranks []int // global ranks, in the order the dump lists them
}

// PGStatus holds a rank's progress counters for one process group. PGID is
// the process-local uid (joined to entries through Entry.PGID), not the name.
type PGStatus struct {
	PGID          string
	LastEnqueued  int64 // -1: none yet
	LastStarted   int64 // -1: none, or timing disabled
	LastCompleted int64
}

// Frame is one Python (or C++) stack frame, innermost first in a stack.
type Frame struct {
	Name     string `json:"name"`
	Filename string `json:"filename"`
	Line     int64  `json:"line"`
}

func (f Frame) String() string { return fmt.Sprintf("%s at %s:%d", f.Name, f.Filename, f.Line) }

// Text is the frame for a text: its function and file quoted (the dump's
// text); String is fr_trace's form, for its output replayed.
func (f Frame) Text() string {
	return fmt.Sprintf("%s at %s:%d", jobtext.Quote(f.Name, jobtext.Func), jobtext.QuoteTail(f.Filename, jobtext.Path), f.Line)
}

// Entry is one recorded communication op: the numbers that differ from
// record to record, and a pointer to what many records share. A large job
// holds tens of millions of entries, so an Entry is 88 bytes.
type Entry struct {
	RecordID        int64
	PGID            int64
	CollectiveSeqID int64
	P2PSeqID        int64
	OpID            int64
	TimeCreatedNs   int64
	TimeStartedNs   int64 // when the watchdog noticed the start; 0 = never
	TimeCompletedNs int64 // when the watchdog noticed completion; 0 = never
	DurationMs      float64
	*Shared         // never nil in a decoded entry; read-only
	HasDuration     bool
	Retired         bool
}

// Shared is the part of an entry that repeats across records: the group,
// the op, the tensors, the state, the stack. A load interns it, so that
// millions of entries point at a few thousand of these, and a stack of
// dozens of C++ frames costs one pointer per entry. Treat it as read-only:
// entries of other ranks share it (Dump.RewriteFrames makes changed
// copies).
type Shared struct {
	PGName        string
	PGDesc        string
	ProfilingName string
	State         string  // scheduled, started or completed
	Op            *OpName // parsed ProfilingName
	*Tensors              // sizes and dtypes; shared by entries that have the same
	Frames        []Frame
	Thread        *Thread // the enqueuing thread (2.10+)
	TimeoutMs     int64
	sigTab        *sigTable // signature numbers are comparable only within one table
	// Sig numbers the entry's signature (op, sizes, dtypes) within one
	// load; 0 when unknown. See signature.go.
	Sig       uint32
	IsP2P     bool
	sigSimple bool
	opBad     bool // Op.Err != "", kept here so that matching need not load Op
}

// Tensors are an entry's tensor shapes (one per tensor; [] for a scalar)
// and dtype names. Entries share one Tensors when they are equal, so treat
// it as read-only.
type Tensors struct {
	InputSizes   [][]int64
	OutputSizes  [][]int64
	InputDtypes  []string
	OutputDtypes []string
}

// Thread is the thread that enqueued an op.
type Thread struct {
	Name string `json:"name"`
	ID   string `json:"id"`
}

// TimedOut reports an entry that left the watchdog's work list without
// completing: it timed out or was aborted.
func (e *Entry) TimedOut() bool { return e.Retired && e.State != "completed" }

// OpName is a parsed profiling_name: "<backend>:<op>[ <meta>]".
type OpName struct {
	Backend string
	Type    string // all_reduce, send, coalesced, ...
	Src     int    // group-local; -1 for collectives; AnySource for "recv 3<-?"
	Dst     int
	Err     string // why the name could not be parsed; "" if it could
}

// AnySource is the source of a receive from any peer ("recv 3<-?").
const AnySource = -2

// ParseOpName splits a profiling name the way fr_trace does: the backend is
// everything before the last ':', the op the first word after it, and the
// meta of send/recv the second word ("1->2", "3<-0").
func ParseOpName(name string) *OpName {
	op := &OpName{Src: -1, Dst: -1}
	i := strings.LastIndexByte(name, ':')
	if i < 0 {
		op.Err = fmt.Sprintf("name formatting error? %s is not '<comm_lib>:<op>'", name)
		return op
	}
	op.Backend = name[:i]
	parts := strings.Split(name[i+1:], " ")
	op.Type = parts[0]
	var meta string
	if len(parts) == 2 {
		meta = parts[1]
	}
	switch op.Type {
	case "send":
		s, d, ok := strings.Cut(meta, "->")
		src, err1 := strconv.Atoi(s)
		dst, err2 := strconv.Atoi(d)
		if !ok || err1 != nil || err2 != nil {
			op.Err = fmt.Sprintf("send without a valid 'src->dst' in %q", name)
			return op
		}
		op.Src, op.Dst = src, dst
	case "recv":
		d, s, ok := strings.Cut(meta, "<-")
		dst, err1 := strconv.Atoi(d)
		src, err2 := strconv.Atoi(s)
		if s == "?" {
			src, err2 = AnySource, nil
		}
		if !ok || err1 != nil || err2 != nil {
			op.Err = fmt.Sprintf("recv without a valid 'dst<-src' in %q", name)
			return op
		}
		op.Src, op.Dst = src, dst
	default:
		if !collectives[op.Type] && op.Type != "coalesced" {
			op.Err = fmt.Sprintf("%s is not a supported operation", op.Type)
		}
	}
	return op
}

// IsP2POp reports a send or recv.
func (o *OpName) IsP2POp() bool { return o.Type == "send" || o.Type == "recv" }

// collectives are the op types fr_trace (torch 2.15) knows; anything else is
// an unsupported operation there.
var collectives = map[string]bool{
	"broadcast": true, "_broadcast_oop": true, "reduce": true, "_reduce_oop": true,
	"all_gather": true, "all_gather_single": true, "all_gather_v": true, "all_reduce": true,
	"_all_gather_base": true, "all_gather_into_tensor_coalesced": true, "reduce_scatter": true,
	"reduce_scatter_single": true, "reduce_scatter_v": true, "reduce_scatter_tensor_coalesced": true,
	"_reduce_scatter_base": true, "gather": true, "scatter": true, "all_to_all": true,
	"all_to_all_single": true, "all_to_all_v_single": true, "all_reduce_barrier": true,
	"barrier": true, "split": true, "new_window": true, "allreduce_coalesced": true,
	"allgather_coalesced": true, "ALLGATHER_coalesced": true, "REDUCE_SCATTER_coalesced": true,
}

// KnownBackends are the communication libraries fr_trace recognises; others
// only earn a warning.
var KnownBackends = map[string]bool{
	"nccl": true, "ncclx": true, "nccl2": true, "nccl-lazy": true, "xccl": true, "gloo": true,
	"rccl": true, "rcclx": true, "mccl": true, "hccl": true, "c10d": true,
}

// ParseVersion parses "MAJOR.MINOR" as two integers ("2.10" > "2.9").
func ParseVersion(v string) (major, minor int, err error) {
	a, b, ok := strings.Cut(v, ".")
	if ok && !strings.Contains(b, ".") {
		major, err1 := strconv.Atoi(a)
		minor, err2 := strconv.Atoi(b)
		if err1 == nil && err2 == nil && major >= 0 && minor >= 0 {
			return major, minor, nil
		}
	}
	return 0, 0, fmt.Errorf("invalid version %q: want MAJOR.MINOR, e.g. \"2.10\"", v)
}

// pyList renders sizes like Python's repr of a list of lists: [[4, 4], []].
func pyList(sizes [][]int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, s := range sizes {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('[')
		for j, n := range s {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.FormatInt(n, 10))
		}
		b.WriteByte(']')
	}
	b.WriteByte(']')
	return b.String()
}

func sizesEqual(a, b [][]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}

// prod is math.prod over one shape; prod of a scalar's [] is 1.
func prod(shape []int64) int64 {
	p := int64(1)
	for _, n := range shape {
		p *= n
	}
	return p
}
