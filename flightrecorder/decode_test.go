package flightrecorder

import (
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/flightrecorder/pickle"
)

func versionDump(version, libKey string) []byte {
	w := pickle.NewWriter()
	w.BeginDict()
	w.String("version")
	w.String(version)
	w.String(libKey)
	w.String("2.21.5")
	w.String("pg_config")
	w.BeginDict()
	w.EndDict()
	w.String("entries")
	w.BeginList()
	w.BeginDict()
	w.String("process_group")
	w.String("0")
	w.String("default_pg")
	w.Tuple2()
	w.String("profiling_name")
	w.String("nccl:all_reduce")
	w.String("collective_seq_id")
	w.TypedIntList(nil) // a wrong type is tolerated: the field falls back to -1
	w.String("input_sizes")
	w.BeginList()
	w.TypedIntList([]int64{4, 4}) // torch's older typed-list form
	w.EndList()
	w.EndDict()
	w.EndList()
	w.EndDict()
	return w.Finish()
}

func TestDecodeVersions(t *testing.T) {
	for minor := 2; minor <= 10; minor++ {
		v := "2." + string(rune('0'+minor%10))
		if minor == 10 {
			v = "2.10"
		}
		key := "nccl_version"
		if minor == 10 {
			key = "comm_lib_version"
		}
		d, err := Decode(versionDump(v, key))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if d.Major != 2 || d.Minor != minor || d.CommLibVersion != "2.21.5" || len(d.Entries) != 1 {
			t.Errorf("%s: %+v", v, d)
		}
		if got := pyList(d.Entries[0].InputSizes); got != "[[4, 4]]" {
			t.Errorf("%s: typed int list decoded as %s", v, got)
		}
	}
	d, err := Decode(versionDump("2.11", "comm_lib_version"))
	if err != nil || !strings.Contains(strings.Join(d.Warnings, " "), "newer than 2.10") {
		t.Errorf("2.11: %v %v", err, d)
	}
	for _, bad := range []string{"3.0", "1.9", "2.1", "two", "2.1.0"} {
		if _, err := Decode(versionDump(bad, "nccl_version")); err == nil {
			t.Errorf("version %q accepted", bad)
		}
	}
}

func TestDecodeJSONQuirks(t *testing.T) {
	js := `{"version": "2.10", "comm_lib_version": "2.27.5",
	 "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0,1]"}},
	 "pg_status": {"0": {"last_enqueued_collective": "183", "last_started_collective": "-1", "last_completed_collective": "182"}},
	 "entries": [{"collective_seq_id": 183, "input_dtypes": ["BFloat16"], "input_sizes": [[4096, 1024]],
	   "is_p2p": false, "op_id": 190, "output_dtypes": ["BFloat16"], "output_sizes": [[4096, 1024]],
	   "p2p_seq_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"], "profiling_name": "nccl:all_reduce",
	   "record_id": 941, "retired": false, "state": "started", "thread_id": "140112233445566", "thread_name": "pt_main_thread",
	   "time_created_ns": 1767225600123456789, "time_discovered_completed_ns": 0, "time_discovered_started_ns": 1767225600124000000,
	   "timeout_ms": 600000}]}`
	d, err := Decode([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	e := d.Entries[0]
	if d.Format != "json" || e.TimeCreatedNs != 1767225600123456789 || e.TimeCompletedNs != 0 || e.RecordID != 941 || e.Thread == nil || e.Thread.ID != "140112233445566" {
		t.Errorf("%+v", e)
	}
	if st := d.PGStatus[0]; st.LastEnqueued != 183 || st.LastStarted != -1 || st.LastCompleted != 182 {
		t.Errorf("pg_status %+v", st)
	}
	if len(d.PGConfig) != 1 || len(d.PGConfig[0].Ranks) != 2 {
		t.Errorf("pg_config %+v", d.PGConfig)
	}
	// Empty entries: the key is omitted.
	if d, err := Decode([]byte(`{"version": "2.10", "pg_config": {}}`)); err != nil || len(d.Entries) != 0 {
		t.Errorf("no entries: %v %+v", err, d)
	}
	for _, bad := range []string{`{"version": "2.10", "entries": [`, `{"entries": []}`, `[1, 2]`, ``} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}
