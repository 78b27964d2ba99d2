// Package frsynth writes synthetic Flight Recorder dumps shaped like the
// ones torch's C++ pickler writes (memoized strings, shared stack frames),
// for tests and benchmarks at sizes no test machine can run for real.
package frsynth

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/probing-mcp/probing-mcp/flightrecorder/pickle"
)

// Fault injects one problem into a synthetic job.
type Fault struct {
	// Kind: "" (healthy), "missing" (Rank stops before Seq; the others
	// enter it and wait), "type" (Rank calls all_gather at Seq), "size"
	// (Rank's tensor at Seq is smaller), "dtype" (Rank uses BFloat16 at Seq).
	Kind string
	Rank int
	Seq  int
}

// Spec describes a synthetic job.
type Spec struct {
	Ranks   int
	Entries int    // ring entries per rank (the newest ones are kept)
	Version string // default "2.10"
	Frames  bool   // record Python stacks
	// CppStack adds the native frames TORCH_NCCL_TRACE_CPP_STACK=1 records:
	// each stack is native frames (op-specific ones innermost, then the
	// dispatcher, pybind11 and the interpreter) under Python frames that
	// differ by call site, so a dump holds many distinct frames and
	// stacks. It implies Frames.
	CppStack bool
	// TP, when > 1, splits ranks into tensor-parallel groups of this size
	// whose collectives interleave with the default group's (1 in 4 ops).
	TP    int
	Fault Fault
}

// op is one collective of the synthetic schedule.
type op struct {
	pg    int // 0 = default group, 1 = this rank's TP group
	seq   int
	name  string
	in    int64
	dtype string
}

// schedule is what rank r issues: the same program on every rank, bent by
// the fault. Sequence numbers count per group.
func schedule(spec Spec, r int) []op {
	var ops []op
	seq := map[int]int{}
	// A healthy job runs a little longer than its ring holds; a faulty one
	// runs until the fault, however long that is.
	n := spec.Entries + 8
	if spec.Fault.Kind != "" {
		n = 2*spec.Fault.Seq + 8
	}
	for i := 0; i < n; i++ {
		pg := 0
		if spec.TP > 1 && i%4 == 3 {
			pg = 1
		}
		seq[pg]++
		o := op{pg: pg, seq: seq[pg], name: "all_reduce", in: 4096, dtype: "BFloat16"}
		if pg == 0 && spec.Fault.Kind != "" && r == spec.Fault.Rank && seq[0] == spec.Fault.Seq {
			switch spec.Fault.Kind {
			case "missing":
				return ops
			case "type":
				o.name = "_all_gather_base"
			case "size":
				o.in = 2048
			case "dtype":
				o.dtype = "Float"
			}
		}
		ops = append(ops, o)
		if pg == 0 && spec.Fault.Kind != "" && seq[0] == spec.Fault.Seq {
			return ops // every rank hangs in the faulty collective
		}
	}
	return ops
}

// Dump returns rank r's dump as pickle bytes.
func Dump(spec Spec, r int) []byte {
	if spec.Version == "" {
		spec.Version = "2.10"
	}
	ops := schedule(spec, r)
	if len(ops) > spec.Entries {
		ops = ops[len(ops)-spec.Entries:]
	}
	firstRecord := int64(len(schedule(spec, r)) - len(ops))
	w := pickle.NewWriter()
	w.BeginDict()
	w.String("version")
	w.String(spec.Version)
	w.String("pg_config")
	w.BeginDict()
	w.String("0")
	pgCfg(w, "0", "default_pg", rangeInts(0, spec.Ranks))
	if spec.TP > 1 {
		name := fmt.Sprint(1 + r/spec.TP)
		w.String(name)
		lo := r / spec.TP * spec.TP
		pgCfg(w, name, "tp", rangeInts(lo, min(lo+spec.TP, spec.Ranks)))
	}
	w.EndDict()
	w.String("comm_lib_version")
	w.String("2.27.5")
	waitsIn := func(o op) bool { return spec.Fault.Kind != "" && o.pg == 0 && o.seq == spec.Fault.Seq }
	last := map[int][3]int64{}
	for _, o := range ops {
		done := int64(o.seq)
		if waitsIn(o) {
			done-- // the op everybody waits in
		}
		last[o.pg] = [3]int64{int64(o.seq), int64(o.seq), done}
	}
	w.String("pg_status")
	w.BeginDict()
	for pg := 0; pg <= 1; pg++ {
		if st, ok := last[pg]; ok {
			w.String(fmt.Sprint(pg))
			w.BeginDict()
			w.String("last_enqueued_collective")
			w.Int(st[0])
			w.String("last_started_collective")
			w.Int(st[1])
			w.String("last_completed_collective")
			w.Int(st[2])
			w.EndDict()
		}
	}
	w.EndDict()
	w.String("entries")
	w.BeginList()
	frameIDs := map[string]uint32{}
	const t0 = int64(1_767_225_600_000_000_000)
	for i, o := range ops {
		pending := waitsIn(o)
		w.BeginDict()
		if spec.Frames || spec.CppStack {
			w.String("frames")
			w.BeginList()
			for _, f := range stackOf(spec, o, i) {
				key := f.name + "\x00" + f.file + "\x00" + fmt.Sprint(f.line)
				if id, ok := frameIDs[key]; ok {
					w.Get(id) // torch's pickler shares a frame dict met before
					continue
				}
				w.BeginDict()
				w.String("name")
				w.String(f.name)
				w.String("filename")
				w.String(f.file)
				w.String("line")
				w.Int(f.line)
				w.EndDict()
				frameIDs[key] = w.Memo()
			}
			w.EndList()
		}
		kv := func(k string, v int64) { w.String(k); w.Int(v) }
		kv("record_id", firstRecord+int64(i))
		kv("pg_id", int64(o.pg))
		w.String("process_group")
		if o.pg == 0 {
			w.String("0")
			w.String("default_pg")
		} else {
			w.String(fmt.Sprint(1 + r/spec.TP))
			w.String("tp")
		}
		w.Tuple2()
		w.String("thread_name")
		w.String("pt_main_thread")
		w.String("thread_id")
		w.String("140112233445566")
		kv("collective_seq_id", int64(o.seq))
		kv("p2p_seq_id", 0)
		kv("op_id", int64(o.seq))
		w.String("profiling_name")
		w.String("nccl:" + o.name)
		kv("time_created_ns", t0+int64(i)*5_000_000)
		if !pending {
			w.String("duration_ms")
			w.Float(1.5)
		}
		out := o.in
		if o.name == "_all_gather_base" {
			out = o.in * int64(spec.Ranks)
		}
		shape := func(n int64) { w.BeginList(); w.BeginList(); w.Int(n); w.EndList(); w.EndList() }
		w.String("input_sizes")
		shape(o.in)
		w.String("input_dtypes")
		w.BeginList()
		w.String(o.dtype)
		w.EndList()
		w.String("output_sizes")
		shape(out)
		w.String("output_dtypes")
		w.BeginList()
		w.String(o.dtype)
		w.EndList()
		state := "completed"
		if pending {
			state = "started"
		}
		w.String("state")
		w.String(state)
		kv("time_discovered_started_ns", t0+int64(i)*5_000_000+100_000)
		w.String("time_discovered_completed_ns")
		if pending {
			w.None()
		} else {
			w.Int(t0 + int64(i)*5_000_000 + 2_000_000)
		}
		w.String("retired")
		w.Bool(!pending)
		kv("timeout_ms", 600_000)
		w.String("is_p2p")
		w.Bool(false)
		w.EndDict()
	}
	w.EndList()
	w.EndDict()
	return w.Finish()
}

func pgCfg(w *pickle.Writer, name, desc string, ranks []int) {
	w.BeginDict()
	w.String("name")
	w.String(name)
	w.String("desc")
	w.String(desc)
	w.String("ranks")
	w.String(rankList(ranks))
	w.EndDict()
}

func rankList(ranks []int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, r := range ranks {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(r))
	}
	b.WriteByte(']')
	return b.String()
}

func rangeInts(lo, hi int) []int {
	out := make([]int, 0, hi-lo)
	for r := lo; r < hi; r++ {
		out = append(out, r)
	}
	return out
}

// Write writes every rank's dump into dir as nccl_trace_rank_<r>, in
// parallel.
func Write(dir string, spec Spec) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	errs := make([]error, spec.Ranks)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for r := 0; r < spec.Ranks; r++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(r int) {
			defer wg.Done()
			defer func() { <-sem }()
			errs[r] = os.WriteFile(filepath.Join(dir, fmt.Sprintf("nccl_trace_rank_%d", r)), Dump(spec, r), 0o644)
		}(r)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
