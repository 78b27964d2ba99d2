// Package tabledocs is the documentation catalog of every built-in table the
// SQL engine exposes: the MEMT rings the in-process agents write (python.*,
// cpu.*, gpu.*, nccl.*), the virtual tables only a live agent can compute,
// the engine's own metadata tables (probing.*) and the server's history
// (history.*). describe_tables, the probing://schema/... resources and the
// probing.table_docs / probing.column_docs tables are generated from it, so
// an LLM can write correct SQL without guessing at names, types or units.
//
// Column lists follow shared/reference/probing-contract.md §3.2 in order and
// dtype; ring tables additionally get TagColumns appended by the engine.
package tabledocs

import (
	"slices"
	"strings"
	"sync"
)

// Column documents one column.
type Column struct {
	Name        string
	Type        string // MEMT dtype name: U8 I32 I64 F32 F64 U64 U32 Str Bytes (or "TEXT"/"INTEGER"/"REAL"/"BLOB" for non-ring tables)
	Unit        string // e.g. "µs since epoch", "ns", "bytes", "MB", "%", "" when none
	Description string
}

// Table documents one table.
type Table struct {
	Schema, Name string
	Description  string   // one or two sentences: what one row is, who writes it, when
	Synonyms     []string // words a user might say ("collectives", "allreduce calls", "step time" …)
	KeyColumns   []string // columns to group/join by (rank, pg_id, global_step …)
	Notes        string   // caveats that change how to read it
	Storage      string   // "ring", "virtual", "history" or "engine"
	Columns      []Column
}

// Storage kinds.
const (
	storageRing    = "ring"    // MEMT file in the data dir, readable here
	storageVirtual = "virtual" // computed inside the live process by the agent; not readable from files
	storageHistory = "history" // our SQLite history
	storageEngine  = "engine"  // docs/meta tables of this engine
)

// Builtin returns every documented table, sorted by schema then name. Each
// call returns a fresh deep copy, so callers may modify the result.
func Builtin() []Table {
	cat := catalog()
	out := make([]Table, len(cat))
	for i := range cat {
		out[i] = cloneTable(cat[i])
	}
	return out
}

// Lookup finds a table by schema and name, ignoring case. The result is a
// copy the caller may modify.
func Lookup(schema, name string) (Table, bool) {
	for _, t := range catalog() {
		if strings.EqualFold(t.Schema, schema) && strings.EqualFold(t.Name, name) {
			return cloneTable(t), true
		}
	}
	return Table{}, false
}

// TagColumns are the columns the engine appends, in this order, after a ring
// table's own columns when it unions the rings of every local process. The
// names and order are Probing's federation tags (§3.1) plus _pid.
func TagColumns() []Column {
	return slices.Clone(tagColumns)
}

var tagColumns = []Column{
	{"_host", "TEXT", "", "Host name of the node whose data dir held the ring. Identical on every row from one node; use it with _rank to say where a straggler runs."},
	{"_addr", "TEXT", "", "Address of the writing process's agent (host:port) when the engine knows it, else ''. Not needed to read rings; only useful to reach the agent."},
	{"_rank", "INTEGER", "", "Global torch.distributed rank of the writing process; -1 when unknown (the agent never reported it). Prefer it to a table's own rank column when that one is -1."},
	{"_node_rank", "INTEGER", "", "Index of the node within the job (torchrun's group rank); -1 when unknown."},
	{"_local_rank", "INTEGER", "", "Rank of the process on its node (LOCAL_RANK, usually also its GPU index); -1 when unknown."},
	{"_role", "TEXT", "", "Parallel coordinates of the process, e.g. 'dp=2,pp=1,tp=0'; '' when unknown. Group by it to compare ranks that should behave alike."},
	{"_pid", "INTEGER", "", "PID of the process that wrote the ring (its <data_dir>/<pid> directory). Distinguishes a restarted rank's old and new rings."},
}

var (
	catalogOnce sync.Once
	catalogData []Table
)

// catalog is the shared, sorted catalog. Never hand it out without cloning.
func catalog() []Table {
	catalogOnce.Do(func() {
		var all []Table
		all = append(all, pythonTables()...)
		all = append(all, systemTables()...)
		all = append(all, ncclTables()...)
		all = append(all, engineTables()...)
		all = append(all, historyTables()...)
		slices.SortStableFunc(all, func(a, b Table) int {
			if c := strings.Compare(a.Schema, b.Schema); c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
		catalogData = all
	})
	return catalogData
}

func cloneTable(t Table) Table {
	t.Synonyms = slices.Clone(t.Synonyms)
	t.KeyColumns = slices.Clone(t.KeyColumns)
	t.Columns = slices.Clone(t.Columns)
	return t
}

// withTimestamp prepends the column every Python @table ring starts with.
func withTimestamp(cols ...Column) []Column {
	ts := Column{"timestamp", "I64", "µs since epoch", "When the agent appended the row (write time, not event time); the ring's time index."}
	return append([]Column{ts}, cols...)
}
