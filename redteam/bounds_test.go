//go:build redteam

package redteam

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// Memory and time at the coordinator (issue 23): the heavy attacks, run by
// `make redteam` (build tag redteam), not by make test.

// TestHugeStacksReply. Attack: a node answers POST /v1/stacks with
// 250 MiB of well-formed JSON (streamed, never held whole by the test).
// Before (b2aa69a): the coordinator read and decoded it all, 29 s against
// its 10 s deadline and 4.3 GB. Bound: get_stacks answers with the node
// missing because its answer is over the stacks' cap ("cut off"); the
// coordinator stays under 512 MB and answers within the fan-out's
// deadline (40 s allowed on a busy machine).
func TestHugeStacksReply(t *testing.T) {
	const size = 250 << 20
	sent := make(chan int64, 1)
	evil := newFakeNode(t, "node-b", 1, []int{2, 3}, map[string]http.HandlerFunc{
		node.PathStacks: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			bw := bufio.NewWriterSize(w, 1<<20)
			one, _ := json.Marshal(rankProcess(2, "/job/"+strings.Repeat("x", 4000)+".py", 1, "f"))
			var n int64
			bw.WriteString(`{"processes":[`)
			for n < size {
				if n > 0 {
					bw.WriteByte(',')
				}
				if _, err := bw.Write(one); err != nil {
					break // the coordinator hung up: what it read is counted
				}
				n += int64(len(one)) + 1
			}
			bw.WriteString(`]}`)
			bw.Flush()
			sent <- n
		},
	})
	honest := newFakeNode(t, "node-a", 0, []int{0, 1}, map[string]http.HandlerFunc{
		node.PathStacks: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, node.StacksReply{Processes: []stacks.Process{rankProcess(0, "/job/train.py", 40, "all_reduce"), rankProcess(1, "/job/train.py", 40, "all_reduce")}})
		},
	})
	c := serveStdio(t, env(t, t.TempDir(), "PROBING_STACK_FANOUT_DEADLINE_SEC=10"), "--peers", honest.node.Addr+","+evil.node.Addr)
	r := c.call("get_stacks", map[string]any{}, fanoutTime)
	mustContain(t, "get_stacks", r.Text, "1/2 node(s) answered", evil.node.Addr, "its answer to /v1/stacks is over 32 MiB: cut off", "all_reduce")
	said(t, r.Text, "cut off")
	c.close()
	select {
	case n := <-sent:
		t.Logf("the hostile node wrote %d MiB before the coordinator hung up", n>>20)
	default:
	}
	bounded(t, "250 MiB /v1/stacks reply", c.p, r.Took, fanoutTime)
}

// TestStoreSlotFlood. Attack: 300 slots of the job's store, each a node
// entry with a 1 MB host field (anyone who reaches MASTER_ADDR:MASTER_PORT
// can write them), beside one honest node's. Before (b2aa69a):
// list_cluster_nodes took 36 s and 5.1 GB, diagnose_hang 122 s and 6 GB.
// Bound: each slot is skipped with a problem line (said once per slot,
// bounded); the honest node is listed and asked; the coordinator stays
// under 512 MB and each call within 40 s (the fan-out's 10 s deadline,
// the store's 5 s per read, a busy machine).
func TestStoreSlotFlood(t *testing.T) {
	honest := newFakeNode(t, "node-a", 0, []int{0, 1}, map[string]http.HandlerFunc{
		node.PathEvidence: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, evidenceReply(2, rankEvidence(0, "/job/train.py", 40, "all_reduce"), rankEvidence(1, "/job/data.py", 12, "loader_wait")))
		},
	})
	store := newFakeStore(t)
	big, _ := json.Marshal(cluster.Node{Host: strings.Repeat("h", 1_000_000), Addr: "127.0.0.1:9", Kind: cluster.KindDaemon})
	for i := 0; i < 300; i++ {
		store.set(fmt.Sprintf("probing-mcp/%s/node/%d", runID, i), big) // one shared 1 MB buffer
	}
	store.set("probing-mcp/"+runID+"/nodes", []byte("300"))
	store.register(honest.node)
	c := serveStdio(t, env(t, t.TempDir(), "TORCHELASTIC_RUN_ID="+runID), "--job", store.addr())
	for _, tool := range []string{"list_cluster_nodes", "diagnose_hang"} {
		r := c.call(tool, map[string]any{}, fanoutTime)
		all := r.Text + string(r.Structured)
		mustContain(t, tool, all, "1/1 node(s) answered", "probing-mcp/"+runID+"/node/0 holds 1000114 bytes, over the 16384 a node's entry takes; skipped")
		if tool == "list_cluster_nodes" {
			mustContain(t, tool, all, honest.node.Addr)
		} else {
			mustContain(t, tool, all, "loader_wait")
		}
		said(t, strings.ReplaceAll(all, `","`, "\n"), "/node/0 holds")
		if len(r.Text) > 256<<10 {
			t.Errorf("%s: %d bytes of text", tool, len(r.Text))
		}
		if bytes.Contains([]byte(all), []byte(strings.Repeat("h", 1000))) {
			t.Errorf("%s: a planted host name came through", tool)
		}
		bounded(t, "300 store slots of 1 MB: "+tool, c.p, r.Took, fanoutTime)
	}
	c.close()
	t.Logf("the store answered %d GETs", store.gets.Load())
	bounded(t, "300 store slots of 1 MB: the coordinator's whole run", c.p, c.p.took, 2*fanoutTime+startTime)
}

// TestHugeEvidenceReply. Attack: TestHugeStacksReply's, on POST
// /v1/evidence: a node answers diagnose_hang's call with 250 MiB of
// well-formed JSON (problem strings and one rank), and with 120 MiB (under
// the cap, so read and decoded whole). Not in issue 23's list: found by
// this suite; the evidence reply had the 256 MiB cap of raw Flight
// Recorder dumps, and 250 MiB took the coordinator to 811-1127 MB. Bound:
// the coordinator stays under 512 MB and answers within 40 s.
func TestHugeEvidenceReply(t *testing.T) {
	for _, size := range []int64{250 << 20, 120 << 20} {
		t.Run(fmt.Sprintf("%dMiB", size>>20), func(t *testing.T) { hugeEvidence(t, size) })
	}
}

func hugeEvidence(t *testing.T, size int64) {
	evil := newFakeNode(t, "node-b", 1, []int{2, 3}, map[string]http.HandlerFunc{
		node.PathEvidence: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			bw := bufio.NewWriterSize(w, 1<<20)
			one, _ := json.Marshal(rankEvidence(2, "/job/train.py", 1, "f"))
			problem, _ := json.Marshal(strings.Repeat("p", 4000))
			bw.WriteString(`{"bundle":{"World":4,"Problems":[`)
			for n := int64(0); n < size; n += int64(len(problem)) + 1 {
				if n > 0 {
					bw.WriteByte(',')
				}
				if _, err := bw.Write(problem); err != nil {
					return // the coordinator hung up
				}
			}
			bw.WriteString(`],"Ranks":{"2":`)
			bw.Write(one)
			bw.WriteString(`}}}`)
			bw.Flush()
		},
	})
	c := serveStdio(t, env(t, t.TempDir()), "--peers", evil.node.Addr)
	r := c.call("diagnose_hang", map[string]any{}, fanoutTime)
	c.close()
	if len(r.Text) > 256<<10 {
		t.Errorf("diagnose_hang: %d bytes of text", len(r.Text))
	}
	bounded(t, fmt.Sprintf("%d MiB /v1/evidence reply", size>>20), c.p, r.Took, fanoutTime)
}
