package flightrecorder

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestCorpusVerdicts pins our verdict on every parity scenario, and whether
// it agrees with fr_trace's. Where it does not, the reason is fr_trace's:
// the comment says which weakness (reference §5) the scenario shows.
func TestCorpusVerdicts(t *testing.T) {
	type want struct {
		verdict  string
		culprits []int
		agrees   bool
	}
	cases := map[string]want{
		"f01_missing_rank":               {"MISSING_RANKS", []int{2}, true},
		"f02_missing_dump":               {"UNDECIDED", []int{2}, true}, // fr_trace aborts; with --allow-incomplete-ranks it cannot decide
		"f03_type_mismatch":              {"COLLECTIVE_TYPE_MISMATCH", []int{1}, true},
		"f04_wrong_culprit":              {"SIZE_OR_SYNTAX_MISMATCH", []int{0}, false}, // fr_trace blames the 3-rank majority
		"f05_dtype_mismatch":             {"COLLECTIVE_DTYPE_MISMATCH", []int{1}, true},
		"f06_in_flight_state":            {"COLLECTIVE_STATE_MISMATCH", []int{1}, true},
		"f07_allgather_numel":            {"SIZE_OR_SYNTAX_MISMATCH", []int{1}, true},
		"f08_alltoall_totals":            {"SIZE_OR_SYNTAX_MISMATCH", nil, true},
		"f09_p2p_two_ranks":              {"OK", nil, true},
		"f10_p2p_in_4rank_pg":            {"OK", nil, false}, // fr_trace: idle ranks 2,3 "missing" from a send/recv
		"f11_p2p_coalesced_bidir":        {"OK", nil, false}, // fr_trace fails a valid bidirectional batch
		"f12_p2p_coalesced_oneway":       {"OK", nil, true},
		"f13_ring_wrap":                  {"MISSING_RANKS", []int{0}, true},
		"f14_wrap_unequal_rids":          {"OK", nil, false}, // fr_trace's record-id cut is shifted by another group's ops
		"f15_mismatch_cap":               {"MISSING_RANKS", []int{1}, true},
		"f16_mixed_versions":             {"OK", nil, false}, // fr_trace aborts on version skew
		"f17_json_dumps":                 {"MISSING_RANKS", []int{2}, true},
		"f18_unknown_op":                 {"OK", nil, false}, // fr_trace aborts on an op it does not know
		"f19_timeout_all_scheduled":      {"OK", nil, true},
		"p2p_ring_batch":                 {"OK", nil, false}, // a valid ring batch fails fr_trace's peer scan
		"p2p_batch_seq_collision":        {"OK", nil, false}, // fr_trace groups a P2P op with a collective of the same number, then aborts
		"p2p_plain_seq_collision":        {"OK", nil, false},
		"pg_missing_in_config":           {"OK", nil, false}, // fr_trace: KeyError; here the group comes from the peers
		"desc_mismatch":                  {"OK", nil, false}, // fr_trace aborts on a description that differs between ranks
		"tp_dp_subgroups":                {"MISSING_RANKS", []int{5}, true},
		"state_timeout_retired":          {"COLLECTIVE_STATE_MISMATCH", []int{3}, true},
		"coalesced_nonp2p_27":            {"SIZE_OR_SYNTAX_MISMATCH", []int{1}, true},
		"bd4_coalesced_size_mismatch":    {"SIZE_OR_SYNTAX_MISMATCH", []int{1}, true},
		"bd6_coalesced_missing_on_rank0": {"MISSING_RANKS", []int{0}, true},
		"allgather_numel":                {"SIZE_OR_SYNTAX_MISMATCH", []int{2}, true},
		"all_gather_base_numel":          {"SIZE_OR_SYNTAX_MISMATCH", []int{1}, true},
		"all_gather_list_form_ok":        {"OK", nil, true},
		"alltoall_single":                {"OK", nil, true},
		"reduce_scatter_ok":              {"OK", nil, true},
		"version_2_3_alltoall":           {"OK", nil, true},
		"p2p_recv_any_source":            {"OK", nil, true},
		"p2p_seq_plain_2ranks":           {"OK", nil, true},
		"unknown_backend_warning":        {"OK", nil, true},
		"bd1_two_pgs_same_name":          {"OK", nil, true},
		"bd2_allreduce_coalesced":        {"OK", nil, true},
		"bd3_coalesced_broadcasts":       {"OK", nil, true},
		"bd5_reduce_scatter_coalesced":   {"OK", nil, true},
	}
	dirs, _ := filepath.Glob("testdata/parity/*/expected.json")
	if len(dirs) != len(cases) {
		t.Errorf("%d scenarios in the corpus, %d in this table", len(dirs), len(cases))
	}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			l, err := Load([]string{filepath.Join("testdata/parity", name)}, LoadOptions{Prefix: "nccl_trace_rank_"})
			if err != nil {
				t.Fatal(err)
			}
			r := AnalyzeLoaded(l, Options{})
			top := r.ProcessGroups[0]
			if r.Verdict != w.verdict || !slices.Equal(nonNil(top.CulpritRanks), w.culprits) {
				t.Fatalf("verdict %s culprits %v, want %s %v: %s", r.Verdict, top.CulpritRanks, w.verdict, w.culprits, r.Summary)
			}
			if top.FRTrace.Agrees != w.agrees {
				t.Errorf("fr_trace agrees=%v, want %v: %+v", top.FRTrace.Agrees, w.agrees, top.FRTrace)
			}
			if !top.FRTrace.Agrees && top.FRTrace.Why == "" {
				t.Error("a difference from fr_trace must say why")
			}
		})
	}
}
