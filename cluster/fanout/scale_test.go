package fanout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/tools"
)

// synthNode is a lightweight node of a large simulated job: real HTTP
// daemon, real wire format, ranks made up in process (thousands of real
// training processes do not fit on this machine). Rank culprit is stuck
// in its data loader; every other rank waits in all_reduce #50.
type synthNode struct {
	node.Local
	ranks   []int
	world   int
	culprit int
	slow    bool // never answers: the caller's deadline ends it
	// now is the node's clock: odd nodes run 37 minutes ahead, so the
	// verdict must come from each rank's own clock.
	now time.Time
}

func (s *synthNode) wait(ctx context.Context) error {
	if s.slow {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func frames(r, culprit int) []stacks.Frame {
	// Innermost first, as the agent reports them.
	fs := []stacks.Frame{{File: "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", Line: 2501, Function: "all_reduce"}}
	if r == culprit {
		fs = []stacks.Frame{{File: "train.py", Line: 67, Function: "fake_data_loader"}}
	}
	for d := 0; d < 14; d++ {
		fs = append(fs, stacks.Frame{File: "/usr/lib/python3/site-packages/torch/nn/modules/module.py", Line: 1500 + d, Function: "_call_impl"})
	}
	return append(fs, stacks.Frame{File: "train.py", Line: 90, Function: "train_epoch"}, stacks.Frame{File: "train.py", Line: 150, Function: "main"}, stacks.Frame{File: "train.py", Line: 200, Function: "<module>"})
}

func (s *synthNode) threads(r int) []stacks.Thread {
	ts := []stacks.Thread{{Name: "MainThread", IsMain: true, Frames: frames(r, s.culprit)}}
	for k := 0; k < 3; k++ {
		ts = append(ts, stacks.Thread{Name: fmt.Sprintf("pin_memory_%d", k), Frames: []stacks.Frame{
			{File: "/usr/lib/python3.11/threading.py", Line: 1002, Function: "_bootstrap"},
			{File: "/usr/lib/python3.11/threading.py", Line: 331, Function: "wait"}}})
	}
	return ts
}

func (s *synthNode) Info(ctx context.Context) (*node.Info, error) {
	in := &node.Info{Node: s.Self, NowNS: time.Now().UnixNano() + s.now.Sub(time.Now()).Round(time.Minute).Nanoseconds(), World: s.world}
	for i, r := range s.ranks {
		in.Ranks = append(in.Ranks, node.RankInfo{Rank: r, LocalRank: i, PID: 1000 + r, Alive: true, Kind: "probing-mcp"})
	}
	return in, s.wait(ctx)
}

func (s *synthNode) Stacks(ctx context.Context, _ node.StacksRequest) (*node.StacksReply, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	rep := &node.StacksReply{}
	for _, r := range s.ranks {
		rep.Processes = append(rep.Processes, stacks.Process{PID: 1000 + r, Rank: r, Host: s.Self.Host, Source: "agent", CapturedAt: s.now, Threads: s.threads(r)})
	}
	return rep, nil
}

func (s *synthNode) Evidence(ctx context.Context, _ node.EvidenceRequest) (*node.EvidenceReply, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	b := &evidence.Bundle{World: s.world, Ranks: map[int]*evidence.RankEvidence{}}
	now := s.now.UnixNano()
	stuck := s.now.Add(-2*time.Minute).UnixNano() / 1000
	for _, r := range s.ranks {
		ts := s.threads(r)
		act := &evidence.RankActivity{Rank: r, LastComm: stuck, LastCommDone: stuck}
		for k := 10; k > 0; k-- {
			act.Steps = append(act.Steps, stuck-int64(k)*100_000)
		}
		b.Ranks[r] = &evidence.RankEvidence{Rank: r, PID: 1000 + r, UID: 1000, Alive: true, Main: &ts[0], Threads: ts, StackSource: "agent", Activity: act, NowNS: now}
		for seq := int64(45); seq <= 50; seq++ {
			row := evidence.CommRow{Rank: r, TimestampUS: stuck - (50-seq)*100_000, Op: "all_reduce", GroupSeq: seq, DurationMS: 3}
			if seq == 50 {
				if r == s.culprit {
					continue
				}
				row.DurationMS = -1
			}
			b.Comm = append(b.Comm, row)
		}
	}
	return &node.EvidenceReply{Bundle: b}, nil
}

// peerTimeout is what a silent node costs each call: long enough that a
// loaded machine's answering nodes are never cut (the test asserts no
// timing; the benchmark measures it).
const peerTimeout = 4 * time.Second

// synthJob starts nodes×perNode ranks on real daemons at distinct
// 127.0.x.y addresses; every tenth node is dead (its daemon never
// started) or slow (it never answers).
func synthJob(t testing.TB, ranks, perNode, culprit int, faults bool) (*fanout.Job, []int, func()) {
	t.Helper()
	var members []cluster.Node
	var missing []int
	var stops []func()
	now := time.Now()
	for n := 0; n*perNode < ranks; n++ {
		ip := fmt.Sprintf("127.0.%d.%d", 10+n/250, 1+n%250)
		var rs []int
		for r := n * perNode; r < min(ranks, (n+1)*perNode); r++ {
			rs = append(rs, r)
		}
		self := cluster.Node{Host: fmt.Sprintf("node%04d", n), NodeRank: n, Ranks: rankset.Format(rs), Kind: cluster.KindDaemon, Source: "store"}
		if faults && n%20 == 9 { // dead: nothing listens
			l, err := net.Listen("tcp", ip+":0")
			if err != nil {
				t.Skipf("no loopback alias %s: %v", ip, err)
			}
			self.Addr = l.Addr().String()
			l.Close()
			members = append(members, self)
			missing = append(missing, rs...)
			continue
		}
		clock := now
		if n%2 == 1 {
			clock = now.Add(37 * time.Minute)
		}
		src := &synthNode{ranks: rs, world: ranks, culprit: culprit, slow: faults && n%20 == 19, now: clock}
		if src.slow {
			missing = append(missing, rs...)
		}
		ln, err := net.Listen("tcp", ip+":0")
		if err != nil {
			t.Skipf("no loopback alias %s: %v", ip, err)
		}
		self.Addr = ln.Addr().String()
		src.Self = self
		srv := &http.Server{Handler: node.Handler(node.Config{Source: src, Token: token})}
		go srv.Serve(ln)
		stops = append(stops, func() { srv.Close() })
		members = append(members, self)
	}
	c := fanout.NewClient(token, 64)
	j := fanout.NewJob(staticMembers(members...), c, fanout.Options{Concurrency: 64, PeerTimeout: peerTimeout, Deadline: 30 * time.Second})
	return j, missing, func() {
		c.Close()
		for _, f := range stops {
			f()
		}
	}
}

// TestScale: 1024 and 4096 ranks (8 per node), 10% of the nodes dead or
// never answering. get_stacks and diagnose_hang answer within the deadline,
// name the culprit, flag the partial data, name every missing rank, and
// leave no goroutine behind.
func TestScale(t *testing.T) {
	for _, ranks := range []int{1024, 4096} {
		t.Run(fmt.Sprint(ranks), func(t *testing.T) {
			if ranks > 1024 && testing.Short() {
				t.Skip("-short")
			}
			base := runtime.NumGoroutine()
			func() {
				j, missing, stop := synthJob(t, ranks, 8, 5, true)
				defer stop()
				env := &tools.Env{Cluster: j}
				stacksRes, err := callTool(env, "get_stacks", map[string]any{})
				if err != nil {
					t.Fatal(err)
				}
				out, _ := json.Marshal(stacksRes)
				s := string(out)
				if !strings.Contains(s, "fake_data_loader") || !strings.Contains(s, `"ranks":"5"`) {
					t.Errorf("the culprit's odd stack is not in the answer: %.600s", s)
				}
				missingText := rankset.Format(missing)
				for _, m := range strings.Split(missingText, ",")[:3] {
					if !strings.Contains(s, m) {
						t.Errorf("missing ranks %s not named", m)
					}
				}
				diag, err := callTool(env, "diagnose_hang", map[string]any{"stall_seconds": 30})
				if err != nil {
					t.Fatal(err)
				}
				text := diag.(interface{ ModelText() string }).ModelText()
				if !strings.Contains(text, "rank 5 is the culprit (cpu_stall, high confidence) at ⟦train.py⟧:67 (⟦fake_data_loader⟧)") || !strings.Contains(text, "node(s) answered") {
					t.Errorf("verdict: %.2000s", text)
				}
				t.Logf("%d ranks: get_stacks %d bytes; diagnose_hang text %d bytes: %.300s", ranks, len(out), len(text), text)
			}()
			deadline := time.Now().Add(30 * time.Second)
			for runtime.NumGoroutine() > base+5 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if n := runtime.NumGoroutine(); n > base+5 {
				buf := make([]byte, 1<<16)
				t.Fatalf("%d goroutines left (base %d):\n%s", n, base, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}

// callTool runs one tool in process, as the skills do.
func callTool(env *tools.Env, name string, args map[string]any) (any, error) {
	for _, d := range tools.All(env) {
		if d.Tool.Name == name {
			return d.Call(context.Background(), args)
		}
	}
	return nil, fmt.Errorf("no tool %s", name)
}

// BenchmarkWholeJob: get_stacks and diagnose_hang over real daemons on
// loopback, 8 ranks per node, every node answering; it reports the
// answer's size next to the naive one (every rank's stack dump, as text,
// concatenated).
//
//	go test -run '^$' -bench WholeJob -benchtime 5x ./cluster/fanout/
func BenchmarkWholeJob(b *testing.B) {
	for _, ranks := range []int{64, 256, 1024, 4096} {
		j, _, stop := synthJob(b, ranks, 8, 5, false)
		env := &tools.Env{Cluster: j}
		naive := 0
		src := &synthNode{culprit: 5}
		for r := 0; r < ranks; r++ {
			for _, t := range src.threads(r) {
				naive += len(fmt.Sprintf("Thread %s (rank %d):\n", t.Name, r))
				for _, f := range t.Frames {
					naive += len(fmt.Sprintf("  File \"%s\", line %d in %s\n", f.File, f.Line, f.Function))
				}
			}
		}
		for _, tool := range []string{"get_stacks", "diagnose_hang"} {
			b.Run(fmt.Sprintf("%s/%d", tool, ranks), func(b *testing.B) {
				size := 0
				for i := 0; i < b.N; i++ {
					res, err := callTool(env, tool, map[string]any{})
					if err != nil {
						b.Fatal(err)
					}
					if t, ok := res.(interface{ ModelText() string }); ok {
						size = len(t.ModelText())
					} else {
						out, _ := json.Marshal(res)
						size = len(out)
					}
				}
				b.ReportMetric(float64(size), "answer_bytes")
				b.ReportMetric(float64(naive), "naive_bytes")
				b.ReportMetric(float64(naive)/float64(size), "x_smaller")
			})
		}
		stop()
	}
}
