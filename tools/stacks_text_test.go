package tools

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// sizes logs a result's text before (its JSON, what the text content was)
// and after (ModelText), for the report.
func sizes(t *testing.T, tool string, r modelTexter) (jsonLen, textLen int) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	text := r.ModelText()
	t.Logf("SIZE %-26s json %6d bytes, text %6d bytes", tool, len(b), len(text))
	if strings.HasPrefix(strings.TrimSpace(text), "{") {
		t.Errorf("%s: the text is JSON:\n%s", tool, text)
	}
	return len(b), len(text)
}

// synthStacks is a job's stacks as the node daemons return them (the
// whole-job scale test's shape, cluster/fanout/scale_test.go): 8 ranks a
// node, every rank's main thread in all_reduce but culprit's, in its data
// loader, and three idle pin-memory threads a rank. Every tenth node did
// not answer (n%20 == 9 unreachable, n%20 == 19 timed out).
func synthStacks(ranks, culprit int, faults bool) ([]stacks.Process, evidence.Coverage) {
	var procs []stacks.Process
	cov := evidence.Coverage{}
	for n := 0; n*8 < ranks; n++ {
		cov.Asked++
		var rs []int
		for r := n * 8; r < min(ranks, (n+1)*8); r++ {
			rs = append(rs, r)
		}
		host := fmt.Sprintf("node%04d", n)
		if faults && (n%20 == 9 || n%20 == 19) {
			node := cluster.Node{Host: host, Addr: fmt.Sprintf("127.0.%d.%d:9781", 10+n/250, 1+n%250), NodeRank: n, Ranks: rankset.Format(rs)}
			err := &evidence.PeerError{Addr: node.Addr, Kind: "unreachable", Msg: "connection refused: no node daemon listens there (is `probing-mcp node` running on that node?)"}
			if n%20 == 19 {
				err = &evidence.PeerError{Addr: node.Addr, Kind: "timeout", Msg: "this node could not answer within the caller's 3.999s"}
			}
			cov.Missing = append(cov.Missing, evidence.Outcome{Node: node, Err: err})
			continue
		}
		cov.Answered++
		for _, r := range rs {
			fs := []stacks.Frame{{File: "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", Line: 2501, Function: "all_reduce"}}
			if r == culprit {
				fs = []stacks.Frame{{File: "train.py", Line: 67, Function: "fake_data_loader"}}
			}
			for d := 0; d < 14; d++ {
				fs = append(fs, stacks.Frame{File: "/usr/lib/python3/site-packages/torch/nn/modules/module.py", Line: 1500 + d, Function: "_call_impl"})
			}
			fs = append(fs, stacks.Frame{File: "train.py", Line: 90, Function: "train_epoch"}, stacks.Frame{File: "train.py", Line: 150, Function: "main"}, stacks.Frame{File: "train.py", Line: 200, Function: "<module>"})
			ts := []stacks.Thread{{Name: "MainThread", IsMain: true, Frames: fs}}
			for k := 0; k < 3; k++ {
				ts = append(ts, stacks.Thread{Name: fmt.Sprintf("pin_memory_%d", k), Frames: []stacks.Frame{
					{File: "/usr/lib/python3.11/threading.py", Line: 331, Function: "wait"},
					{File: "/usr/lib/python3.11/threading.py", Line: 1002, Function: "_bootstrap"}}})
			}
			procs = append(procs, stacks.Process{PID: 1000 + r, Rank: r, Host: host, Source: "agent", Threads: ts})
		}
	}
	return procs, cov
}

// wholeJobStacks builds get_stacks' whole-job result as its handler does.
func wholeJobStacks(procs []stacks.Process, cov evidence.Coverage) GetStacksResult {
	res := GetStacksResult{Sources: map[string]string{}, Coverage: coverageView(&cov)}
	by := map[string][]int{}
	for _, pr := range procs {
		by[pr.Source] = append(by[pr.Source], pr.Rank)
	}
	for src, rs := range by {
		res.Sources[src] = "ranks " + rankset.Format(rs)
	}
	res.Merged = stacks.Merge(procs, stacks.MergeOptions{})
	return res
}

// TestGetStacksTextAtScale: 4096 ranks, 51 of 512 nodes missing. The JSON
// runs to kilobytes of rank sets; the text stays well under 2 KB and
// still says the culprit, its frame, the majority's, and who is missing.
func TestGetStacksTextAtScale(t *testing.T) {
	res := wholeJobStacks(synthStacks(4096, 5, true))
	jsonLen, textLen := sizes(t, "get_stacks (4096, 51 lost)", res)
	text := res.ModelText()
	first, _, _ := strings.Cut(text, "\n")
	if !strings.HasPrefix(first, "main thread: ranks 0-4,6-71,") || !strings.Contains(first, "ranks in all) in ⟦all_reduce⟧ (⟦distributed_c10d.py⟧:2501); rank 5 in ⟦fake_data_loader⟧ (⟦train.py⟧:67) ← odd one out") {
		t.Errorf("summary line: %s", first)
	}
	for _, want := range []string{
		"[1] ODD ONE OUT main thread, rank 5: 1 thread(s)",
		"⟦fake_data_loader⟧ ⟦train.py⟧:67",
		"⟦_call_impl⟧ ⟦torch/nn/modules/module.py⟧:1500 ×14",
		"⟦all_reduce⟧ ⟦torch/distributed/distributed_c10d.py⟧:2501",
		"Idle: 11064 thread(s) in 1 stack(s)", "include_idle=true",
		"partial: 461 of 512 node(s) answered",
		"Scope: the whole job, 461/512 node(s) answered; 51 did not (25 timeout, 26 unreachable), their ranks 72-79,152-159,",
		"(408 ranks in all) not seen",
		"⟦node0009⟧ (127.0.10.10:9781) unreachable, ranks 72-79: connection refused",
		"… 48 more node(s): list_cluster_nodes",
		"Sources: agent: every rank",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if textLen >= 2000 || jsonLen < 4*textLen {
		t.Errorf("text %d bytes (want well under 2 KB), JSON %d:\n%s", textLen, jsonLen, text)
	}
}

// TestGetStacksTextSmallJob: the demo's four ranks (rank 2 in its data
// loader), one process failing, a page of groups cut by max_groups, and
// merge=false's per-process listing.
func TestGetStacksTextSmallJob(t *testing.T) {
	var procs []stacks.Process
	for r := 0; r < 4; r++ {
		f := stacks.Frame{File: "/tmp/demo/socket_rank.py", Line: 56, Function: "all_reduce"}
		if r == 2 {
			f = stacks.Frame{File: "/tmp/demo/socket_rank.py", Line: 67, Function: "fake_data_loader"}
		}
		procs = append(procs, stacks.Process{PID: 100 + r, Rank: r, Source: "agent", Threads: []stacks.Thread{
			{Name: "MainThread", IsMain: true, State: "S", Frames: []stacks.Frame{f, {File: "/tmp/demo/socket_rank.py", Line: 90, Function: "main"}}},
			{Name: fmt.Sprintf("Thread-%d (heartbeat)", r), State: "S", Frames: []stacks.Frame{{File: "/tmp/demo/socket_rank.py", Line: 30 + r, Function: "heartbeat"}}},
		}})
	}
	procs = append(procs, stacks.Process{PID: 104, Rank: 4, Source: "proc", Err: "agent timed out after 2s; faulthandler dump empty"})
	res := GetStacksResult{Sources: map[string]string{}, HistoryIDs: []int64{7, 8, 9, 10}}
	for _, p := range procs {
		res.Sources[fmt.Sprint(p.PID)] = p.Source
	}
	res.Merged = stacks.Merge(procs, stacks.MergeOptions{MaxGroups: 3})
	_, textLen := sizes(t, "get_stacks (4 ranks)", res)
	text := res.ModelText()
	first, _, _ := strings.Cut(text, "\n")
	if first != "main thread: ranks 0-1,3 in ⟦all_reduce⟧ (⟦socket_rank.py⟧:56); rank 2 in ⟦fake_data_loader⟧ (⟦socket_rank.py⟧:67) ← odd one out; 1 capture(s) failed or partial (rank 4)" {
		t.Errorf("summary line: %s", first)
	}
	for _, want := range []string{
		"⟦fake_data_loader⟧ ⟦/tmp/demo/socket_rank.py⟧:67",
		"Cut: 3 more stack group(s) (3 thread(s)) over max_groups: pass max_groups up to 50",
		"rank 4 (pid 104), proc: ⟦agent timed out",
		"Sources: agent: pid(s) 100,101,102,103; proc: pid(s) 104",
		"Stored: history.stack_captures id(s) 7-10",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if textLen > 2000 {
		t.Errorf("text %d bytes", textLen)
	}

	res.Processes, res.Groups = boundProcesses(procs, 0), nil
	text = res.ModelText()
	for _, want := range []string{"Per process (merge=false):", "rank 2 (pid 102), agent: 2 thread(s)", "⟦MainThread⟧ (main) state S:", "⟦heartbeat⟧ ⟦/tmp/demo/socket_rank.py⟧:32"} {
		if !strings.Contains(text, want) {
			t.Errorf("merge=false text lacks %q:\n%s", want, text)
		}
	}
}
