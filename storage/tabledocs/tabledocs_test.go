package tabledocs

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// contractColumns transcribes probing-contract.md §3.2 (and, for the engine
// and history tables, the columns of storage/sqlengine's and
// storage/history's DDL) as "name:TYPE" lists, independently of the
// catalog, so a dropped, reordered or retyped column fails the test.
var contractColumns = map[string][]string{
	"python.torch_nccl_flight_record": {
		"timestamp:I64", "snapshot_id:I64", "rank:I64", "world_size:I64", "record_id:I64",
		"pg_id:Str", "pg_name:Str", "pg_desc:Str", "collective_seq_id:I64", "p2p_seq_id:I64", "op_id:I64",
		"profiling_name:Str", "state:Str", "input_sizes:Str", "input_dtypes:Str", "output_sizes:Str", "output_dtypes:Str",
		"time_created_ns:I64", "time_discovered_started_ns:I64", "time_discovered_completed_ns:I64", "duration_ns:I64",
		"timeout_ms:I64", "retired:I64", "is_p2p:I64", "frames:Str", "top_frame:Str",
	},
	"python.torch_nccl_pg_status": {
		"timestamp:I64", "snapshot_id:I64", "rank:I64", "world_size:I64", "pg_id:Str", "pg_name:Str", "pg_desc:Str",
		"ranks:Str", "last_enqueued_collective:I64", "last_started_collective:I64", "last_completed_collective:I64",
	},
	"python.comm_collective": {
		"timestamp:I64", "micro_step:I64", "local_step:I64", "global_step:I64", "micro_batches:I64", "rank:I64",
		"world_size:I64", "role:Str", "op:Str", "group_rank:I64", "group_size:I64", "participate_ranks:Str",
		"tensor_shape:Str", "tensor_dtype:Str", "bytes:I64", "duration_ms:F64", "async_op:I64",
		"group_seq:I64", "peer:I64", // our agent's extensions, after the contract's columns
	},
	"python.torch_trace": {
		"timestamp:I64", "micro_step:I64", "local_step:I64", "global_step:I64", "micro_batches:I64", "seq:I64",
		"module:Str", "stage:Str", "allocated:F64", "max_allocated:F64", "cached:F64", "max_cached:F64",
		"time_offset:F64", "duration:F64", "allocated_delta:F64", "max_allocated_delta:F64", "rank:I64",
		"world_size:I64", "role:Str",
	},
	"python.torch_step_timing": {
		"timestamp:I64", "micro_step:I64", "local_step:I64", "global_step:I64", "micro_batches:I64", "rank:I64",
		"world_size:I64", "role:Str", "step_duration_sec:F64", "is_shadow:I64", "sampled:I64", "shadow_normal:I64",
		"shadow_baseline:I64", "sample_rate:F64", "sample_mode:Str",
	},
	"python.trace_event": {
		"timestamp:I64", "record_type:Str", "trace_id:I64", "span_id:I64", "name:Str", "time:I64", "thread_id:I64",
		"parent_id:I64", "phase:Str", "location:Str", "attributes:Str", "event_attributes:Str",
	},
	"python.trace_variables": {
		"timestamp:I64", "function_name:Str", "filename:Str", "lineno:I64", "variable_name:Str", "value:Str", "value_type:Str",
	},
	"python.variables": {"timestamp:I64", "micro_step:I64", "func:Str", "name:Str", "value:Str"},
	"python.backtrace": {"ip:Str", "file:Str", "func:Str", "lineno:I64", "depth:I64", "frame_type:Str"},
	"cpu.utilization": {
		"ts:I64", "scope:Str", "platform:Str", "tid:I32", "comm:Str", "wall_ns:I64", "delta_user_ns:I64",
		"delta_sys_ns:I64", "delta_total_ns:I64", "cpu_user_pct:F32", "cpu_sys_pct:F32", "cpu_total_pct:F32",
		"cum_user_ns:I64", "cum_sys_ns:I64", "rss_kb:I64", "thread_count:I32", "delta_vol_ctxt:I64",
		"delta_invol_ctxt:I64", "state:Str", "wchan:Str",
	},
	"cpu.tasks": {
		"ts:I64", "platform:Str", "tid:I32", "comm:Str", "state:Str", "wchan:Str", "wall_ns:I64",
		"delta_user_ns:I64", "delta_sys_ns:I64", "delta_total_ns:I64",
	},
	"gpu.utilization": {
		"ts:I64", "backend:Str", "device_id:I32", "name:Str", "memory_model:Str", "chip:Str", "free_bytes:I64",
		"total_bytes:I64", "used_bytes:I64", "mem_used_pct:F32", "gpu_util_pct:F32", "mem_controller_util_pct:F32",
		"renderer_util_pct:F32", "tiler_util_pct:F32", "driver_mem_bytes:I64", "wall_ns:I64", "vector_util_pct:F32",
		"mem_bandwidth_util_pct:F32", "temperature_c:F32", "power_w:F32",
	},
	"process.kmsg": {"timestamp:I64", "facility:Str", "level:Str", "message:Str"},
	"rdma.mlx_hca": {
		"hca_name:Str", "rcv_pkts_rate:F64", "snd_pkts_rate:F64", "link_downed:F64", "np_cnp_sent:F64",
		"np_ecn_marked_roce_packets:F64",
	},
	"nccl.proxy_ops": {
		"ts:I64", "rank:I32", "tp_rank:I32", "pp_rank:I32", "dp_rank:I32", "comm_hash:U64", "coll_func:Str",
		"seq:U64", "channel_id:I32", "peer:I32", "is_send:I32", "n_steps:I32", "trans_bytes:U64",
		"send_gpu_wait_ns:I64", "send_peer_wait_ns:I64", "send_wait_ns:I64", "recv_wait_ns:I64", "recv_flush_wait_ns:I64",
	},
	"nccl.coll_perf": {
		"ts:I64", "rank:I32", "tp_rank:I32", "pp_rank:I32", "dp_rank:I32", "comm_hash:U64", "n_ranks:I32",
		"coll_func:Str", "seq:U64", "is_p2p:I32", "peer:I32", "count:U64", "msg_size_bytes:U64", "dtype:Str",
		"algo:Str", "proto:Str", "n_channels:I32", "exec_time_ns:I64", "enqueue_time_ns:I64", "timing_source:Str",
		"algobw_gbps:F64", "pool_events_dropped:I32",
	},
	"nccl.inflight_ops": {
		"ts:I64", "rank:I32", "comm_hash:U64", "coll_func:Str", "seq:U64", "kind:Str", "channel_id:I32",
		"peer:I32", "is_send:I32", "start_ns:I64", "age_ns:I64",
	},
	"nccl.net_qp": {
		"ts:I64", "rank:I32", "device:I32", "qp_num:I32", "wr_id:U64", "opcode:I32", "length:U64", "duration_ns:I64",
	},
	"nccl.profiler_counters": {
		"ts:I64", "rank:I32", "coll_events:U64", "p2p_events:U64", "proxy_op_events:U64", "proxy_step_events:U64",
		"kernel_ch_events:U64", "net_events:U64", "rows_written:U64", "pool_exhausted:U64", "write_errors:U64",
		"filtered:U64", "coll_live:I32", "proxy_live:I32", "step_live:I32", "kch_live:I32", "net_live:I32",
		"coll_cap:I32", "proxy_cap:I32", "step_cap:I32", "kch_cap:I32", "net_cap:I32",
		"ring_chunks_recycled:U64", "ring_rows_overwritten:U64",
	},
	"probing.table_docs": {
		"table_schema:TEXT", "table_name:TEXT", "description:TEXT", "synonyms:TEXT", "notes:TEXT", "global_name:TEXT",
		"storage:TEXT", "key_columns:TEXT", "processes:INTEGER",
	},
	"probing.column_docs": {
		"table_schema:TEXT", "table_name:TEXT", "column_name:TEXT", "data_type:TEXT", "unit:TEXT", "description:TEXT",
		"ordinal:INTEGER",
	},
	"probing.rings": {
		"schema_name:TEXT", "table_name:TEXT", "pid:INTEGER", "path:TEXT", "writer_alive:INTEGER", "columns:INTEGER",
		"chunks:INTEGER", "chunk_size:INTEGER", "bytes:INTEGER", "dedup:INTEGER", "chunks_recycled:INTEGER",
		"rows_overwritten:INTEGER", "writes_blocked:INTEGER",
	},
	"history.fr_snapshots": {
		"id:INTEGER", "taken_at_us:INTEGER", "host:TEXT", "pid:INTEGER", "rank:INTEGER", "world_size:INTEGER",
		"source:TEXT", "format:TEXT", "trace_version:TEXT", "entries:INTEGER", "size_bytes:INTEGER", "sha256:TEXT",
		"note:TEXT", "data:BLOB",
	},
	"history.stack_captures": {
		"id:INTEGER", "taken_at_us:INTEGER", "host:TEXT", "pid:INTEGER", "rank:INTEGER", "method:TEXT",
		"thread_count:INTEGER", "stacks_json:TEXT",
	},
	"history.diagnoses": {
		"id:INTEGER", "created_at_us:INTEGER", "kind:TEXT", "inputs_json:TEXT", "verdict:TEXT",
		"culprit_ranks:TEXT", "report_json:TEXT",
	},
	"history.alerts": {
		"id:INTEGER", "at_us:INTEGER", "kind:TEXT", "level:TEXT", "title:TEXT", "text:TEXT", "job:TEXT", "host:TEXT",
		"incident:INTEGER", "state:TEXT", "category:TEXT", "culprit_ranks:TEXT", "location:TEXT", "confidence:TEXT",
		"diagnosis_id:INTEGER", "delivery:TEXT", "headline_json:TEXT",
	},
	"history.audit": {
		"id:INTEGER", "ts_us:INTEGER", "tool:TEXT", "phase:TEXT", "caller:TEXT", "args_json:TEXT",
		"outcome:TEXT", "error:TEXT",
	},
}

// Storage each contract table must have.
// oursBeyondContract are tables probing-mcp writes that Probing does not;
// gpu's TestRingDocs checks their columns against the writer.
var oursBeyondContract = map[string]bool{"gpu.nvml": true, "gpu.processes": true, "gpu.xid": true, "gpu.sampler": true}

var contractStorage = map[string]string{
	"python.backtrace": storageVirtual,
	"process.kmsg":     storageVirtual,
	"rdma.mlx_hca":     storageVirtual,
}

func storageFor(key string) string {
	if s, ok := contractStorage[key]; ok {
		return s
	}
	switch {
	case strings.HasPrefix(key, "probing."):
		return storageEngine
	case strings.HasPrefix(key, "history."):
		return storageHistory
	}
	return storageRing
}

var (
	memtTypes   = []string{"U8", "I32", "I64", "F32", "F64", "U64", "U32", "Str", "Bytes"}
	sqliteTypes = []string{"TEXT", "INTEGER", "REAL", "BLOB"}
)

func key(t Table) string { return t.Schema + "." + t.Name }

func TestMatchesContract(t *testing.T) {
	got := map[string]Table{}
	for _, tb := range Builtin() {
		got[key(tb)] = tb
	}
	for k, want := range contractColumns {
		tb, ok := got[k]
		if !ok {
			t.Errorf("%s: missing", k)
			continue
		}
		var have []string
		for _, c := range tb.Columns {
			have = append(have, c.Name+":"+c.Type)
		}
		if !slices.Equal(have, want) {
			t.Errorf("%s columns:\n got  %v\n want %v", k, have, want)
		}
		if ws := storageFor(k); tb.Storage != ws {
			t.Errorf("%s: storage %q, want %q", k, tb.Storage, ws)
		}
	}
	for k := range got {
		if _, ok := contractColumns[k]; !ok && !oursBeyondContract[k] {
			t.Errorf("%s: documented but not in the contract list of this test", k)
		}
	}
	// gpu.devices has no columns in the contract, so it must not be invented.
	if _, ok := Lookup("gpu", "devices"); ok {
		t.Error("gpu.devices is documented, but the contract names no columns for it")
	}
}

// §4.4's worked examples give the column counts of three rings.
func TestWorkedColumnCounts(t *testing.T) {
	for k, n := range map[string]int{"python.torch_nccl_pg_status": 11, "nccl.proxy_ops": 18, "cpu.utilization": 20} {
		s, name, _ := strings.Cut(k, ".")
		tb, ok := Lookup(s, name)
		if !ok || len(tb.Columns) != n {
			t.Errorf("%s: %d columns, want %d", k, len(tb.Columns), n)
		}
	}
}

func TestWellFormed(t *testing.T) {
	all := Builtin()
	if len(all) == 0 {
		t.Fatal("empty catalog")
	}
	seen := map[string]bool{}
	for i, tb := range all {
		k := strings.ToLower(key(tb))
		if seen[k] {
			t.Errorf("%s: duplicate table", k)
		}
		seen[k] = true
		if i > 0 {
			p := all[i-1]
			if p.Schema > tb.Schema || (p.Schema == tb.Schema && p.Name >= tb.Name) {
				t.Errorf("not sorted: %s before %s", key(p), key(tb))
			}
		}
		if tb.Schema == "" || tb.Name == "" || tb.Schema != strings.ToLower(tb.Schema) || tb.Name != strings.ToLower(tb.Name) {
			t.Errorf("%q.%q: schema and name must be non-empty lower case", tb.Schema, tb.Name)
		}
		if strings.TrimSpace(tb.Description) == "" {
			t.Errorf("%s: no description", k)
		}
		if len(tb.Synonyms) == 0 {
			t.Errorf("%s: no synonyms", k)
		}
		if len(tb.Columns) == 0 {
			t.Errorf("%s: no columns", k)
		}
		allowed := memtTypes
		switch tb.Storage {
		case storageRing, storageVirtual:
		case storageHistory, storageEngine:
			allowed = sqliteTypes
		default:
			t.Errorf("%s: unknown storage %q", k, tb.Storage)
		}
		cols := map[string]bool{}
		for _, c := range tb.Columns {
			cn := strings.ToLower(c.Name)
			if cols[cn] {
				t.Errorf("%s.%s: duplicate column", k, c.Name)
			}
			cols[cn] = true
			if strings.HasPrefix(c.Name, "_") {
				t.Errorf("%s.%s: leading underscore is reserved for tag columns", k, c.Name)
			}
			if !slices.Contains(allowed, c.Type) {
				t.Errorf("%s.%s: type %q not allowed for %s tables", k, c.Name, c.Type, tb.Storage)
			}
			if d := strings.TrimSpace(c.Description); d == "" || strings.EqualFold(d, c.Name) {
				t.Errorf("%s.%s: no useful description", k, c.Name)
			}
			checkUnit(t, k, c)
		}
		for _, kc := range tb.KeyColumns {
			if !cols[kc] {
				t.Errorf("%s: key column %q is not a column", k, kc)
			}
		}
	}
}

// checkUnit keeps units consistent with the names that announce them.
func checkUnit(t *testing.T, table string, c Column) {
	t.Helper()
	want := ""
	switch {
	case strings.HasSuffix(c.Name, "_ns"):
		want = "ns"
	case strings.HasSuffix(c.Name, "_us"):
		want = "µs"
	case strings.HasSuffix(c.Name, "_ms"):
		want = "ms"
	case strings.HasSuffix(c.Name, "_sec"):
		want = "s"
	case strings.HasSuffix(c.Name, "_bytes"):
		want = "bytes"
	case strings.HasSuffix(c.Name, "_pct"):
		want = "%"
	case c.Name == "ts" || c.Name == "timestamp":
		want = "since"
	}
	if want != "" && !strings.Contains(c.Unit, want) {
		t.Errorf("%s.%s: unit %q should mention %q", table, c.Name, c.Unit, want)
	}
}

func TestRingTimeColumn(t *testing.T) {
	for _, tb := range Builtin() {
		if tb.Storage != storageRing {
			continue
		}
		first := tb.Columns[0]
		// The ring's ts_col is the first I64 column named timestamp or ts.
		if first.Type != "I64" || (first.Name != "timestamp" && first.Name != "ts") {
			t.Errorf("%s: first column %s %s, want an I64 timestamp or ts", key(tb), first.Name, first.Type)
		}
		if tb.Schema == "python" {
			if first.Name != "timestamp" || first.Unit != "µs since epoch" {
				t.Errorf("%s: python @table rings start with timestamp I64 µs, got %+v", key(tb), first)
			}
		}
		wantUnit := "µs since epoch"
		if tb.Schema == "nccl" {
			wantUnit = "ns since epoch"
		}
		if first.Unit != wantUnit {
			t.Errorf("%s.%s: unit %q, want %q", key(tb), first.Name, first.Unit, wantUnit)
		}
	}
}

func TestTagColumns(t *testing.T) {
	tags := TagColumns()
	var names []string
	for _, c := range tags {
		names = append(names, c.Name+":"+c.Type)
		if strings.TrimSpace(c.Description) == "" {
			t.Errorf("%s: no description", c.Name)
		}
	}
	want := []string{"_host:TEXT", "_addr:TEXT", "_rank:INTEGER", "_node_rank:INTEGER", "_local_rank:INTEGER", "_role:TEXT", "_pid:INTEGER"}
	if !slices.Equal(names, want) {
		t.Errorf("tags %v, want %v", names, want)
	}
	tags[0].Name = "mutated"
	if TagColumns()[0].Name != "_host" {
		t.Error("TagColumns shares its backing array")
	}
}

func TestLookup(t *testing.T) {
	for _, q := range [][2]string{{"nccl", "proxy_ops"}, {"NCCL", "Proxy_Ops"}, {"Nccl", "PROXY_OPS"}} {
		tb, ok := Lookup(q[0], q[1])
		if !ok || tb.Schema != "nccl" || tb.Name != "proxy_ops" {
			t.Errorf("Lookup(%q, %q) = %s, %v", q[0], q[1], key(tb), ok)
		}
	}
	for _, q := range [][2]string{{"nccl", "nope"}, {"", ""}, {"proxy_ops", "nccl"}, {"python", "torch"}} {
		if _, ok := Lookup(q[0], q[1]); ok {
			t.Errorf("Lookup(%q, %q) found something", q[0], q[1])
		}
	}
}

func TestCopies(t *testing.T) {
	// Render the catalog to text first: a shallow copy would share the very
	// slices the mutations below write to, so it cannot be the reference.
	before := fmt.Sprintf("%#v", Builtin())

	tb, _ := Lookup("python", "torch_nccl_flight_record")
	tb.Description = "x"
	tb.Columns[0].Name = "x"
	tb.Columns = append(tb.Columns[:1], Column{Name: "y"})
	tb.Synonyms[0] = "x"
	tb.KeyColumns[0] = "x"

	all := Builtin()
	for i := range all {
		for _, s := range [][]string{all[i].Synonyms, all[i].KeyColumns} {
			if len(s) > 0 {
				s[0] = "x"
			}
		}
		if len(all[i].Columns) > 0 {
			all[i].Columns[0].Description = "x"
		}
	}
	all[1] = Table{}

	if after := fmt.Sprintf("%#v", Builtin()); after != before {
		t.Error("the catalog changed after mutating a returned copy")
	}
	again, _ := Lookup("python", "torch_nccl_flight_record")
	if again.Columns[0].Name != "timestamp" || again.Synonyms[0] == "x" || again.KeyColumns[0] == "x" || len(again.Columns) != 26 {
		t.Error("Lookup result shares state with the catalog")
	}
}
