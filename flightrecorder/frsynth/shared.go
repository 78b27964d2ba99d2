package frsynth

import (
	"strconv"

	"github.com/probing-mcp/probing-mcp/flightrecorder/pickle"
)

// SharedSpec describes one rank's dump whose process groups share large
// rank lists through the pickle memo: the list is written once and every
// group names it with a memo reference (a few bytes). A hostile file is
// built this way (issue 23: 16 groups sharing one 1M-rank list in 7.9 MB),
// and so is a legitimate dump of a very large job in which many groups
// span the whole world.
type SharedSpec struct {
	Ranks   int  // members of each list
	Groups  int  // groups in pg_config
	Lists   int  // distinct lists (default 1); group g names list g%Lists
	Ints    bool // lists of ints, memoised; default: list literal strings as torch writes them
	Entries int  // collectives recorded per group (default 1); the last one pending
	// Stop, when > 0, makes this rank one that completed Stop collectives
	// per group and never enqueued the next, which its peers wait in.
	Stop    int
	Version string // default "2.10"
}

// SharedGroups returns spec's dump as pickle bytes. List l holds the ranks
// 0..Ranks-1 rotated by l, so that lists differ but name the same world.
func SharedGroups(spec SharedSpec) []byte {
	if spec.Version == "" {
		spec.Version = "2.10"
	}
	spec.Lists = max(spec.Lists, 1)
	spec.Entries = max(spec.Entries, 1)
	w := pickle.NewWriter()
	w.BeginDict()
	w.String("version")
	w.String(spec.Version)
	w.String("pg_config")
	w.BeginDict()
	listMemo := map[int]uint32{} // list of ints -> its memo slot
	listText := map[int]string{} // list literal -> its text (String memoises it)
	for g := 0; g < spec.Groups; g++ {
		name := strconv.Itoa(g)
		w.String(name)
		w.BeginDict()
		w.String("name")
		w.String(name)
		w.String("desc")
		w.String("shared_" + name)
		w.String("ranks")
		l := g % spec.Lists
		ranks := func() []int {
			out := make([]int, spec.Ranks)
			for i := range out {
				out[i] = (i + l) % spec.Ranks
			}
			return out
		}
		switch id, ok := listMemo[l]; {
		case ok:
			w.Get(id)
		case spec.Ints:
			w.BeginList()
			for _, r := range ranks() {
				w.Int(int64(r))
			}
			w.EndList()
			listMemo[l] = w.Memo()
		default:
			t, ok := listText[l]
			if !ok {
				t = rankList(ranks())
				listText[l] = t
			}
			w.String(t) // a memo reference after the first time
		}
		w.EndDict()
	}
	w.EndDict()
	w.String("entries")
	w.BeginList()
	rec := int64(0)
	n := spec.Entries
	if spec.Stop > 0 {
		n = spec.Stop
	}
	for g := 0; g < spec.Groups; g++ {
		for s := 1; s <= n; s++ {
			pending := s == n && spec.Stop == 0
			w.BeginDict()
			kv := func(k string, v int64) { w.String(k); w.Int(v) }
			kv("record_id", rec)
			rec++
			kv("pg_id", int64(g))
			w.String("process_group")
			w.String(strconv.Itoa(g))
			w.String("shared_" + strconv.Itoa(g))
			w.Tuple2()
			kv("collective_seq_id", int64(s))
			kv("p2p_seq_id", 0)
			kv("op_id", int64(s))
			w.String("profiling_name")
			w.String("nccl:all_reduce")
			kv("time_created_ns", 1_767_225_600_000_000_000+rec*1_000_000)
			for _, k := range []string{"input_sizes", "output_sizes"} {
				w.String(k)
				w.BeginList()
				w.BeginList()
				w.Int(1024)
				w.EndList()
				w.EndList()
			}
			for _, k := range []string{"input_dtypes", "output_dtypes"} {
				w.String(k)
				w.BeginList()
				w.String("Float")
				w.EndList()
			}
			w.String("state")
			if pending {
				w.String("started")
			} else {
				w.String("completed")
			}
			w.String("retired")
			w.Bool(!pending)
			kv("timeout_ms", 600_000)
			w.String("is_p2p")
			w.Bool(false)
			w.EndDict()
		}
	}
	w.EndList()
	w.EndDict()
	return w.Finish()
}
