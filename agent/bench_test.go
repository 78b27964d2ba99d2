package agent_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// BenchmarkGetStacks measures what get_stacks does for 1 and 16 local
// processes (each with a main thread 20 frames deep and 3 worker threads):
// discovery, the fan-out of /apis/stacks calls, and the merge. Results in
// docs/BENCHMARKS.md.
//
//	go test ./agent -run '^$' -bench GetStacks -benchtime 20x
func BenchmarkGetStacks(b *testing.B) {
	code := "import threading, time\n" +
		"def worker():\n    while True: time.sleep(0.05)\n" +
		"for i in range(3): threading.Thread(target=worker, name='worker-%d' % i, daemon=True).start()\n" +
		"def deep(n):\n    if n == 0:\n        print('READY', flush=True)\n        while True: time.sleep(0.05)\n    deep(n - 1)\n" +
		"deep(20)\n"
	for _, n := range []int{1, 16} {
		dirs := newDirs(b)
		procs := make([]*proc, n)
		for i := range procs {
			procs[i] = startAgentIn(b, dirs, code, fmt.Sprintf("RANK=%d", i))
		}
		b.Run(fmt.Sprintf("processes=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				all, err := agent.Discover(procs[0].opt)
				if err != nil {
					b.Fatal(err)
				}
				var pids []int
				for _, p := range procs {
					pids = append(pids, p.pid())
				}
				agents, err := agent.Select(all, agent.Selection{PIDs: pids})
				if err != nil {
					b.Fatal(err)
				}
				got := agent.CollectStacks(context.Background(), agents, agent.StackOptions{})
				m := stacks.Merge(got, stacks.MergeOptions{})
				if m.Processes != n || len(m.Failed) != 0 {
					b.Fatalf("merged %d processes, failures %+v", m.Processes, m.Failed)
				}
			}
		})
		for _, p := range procs {
			p.kill()
		}
	}
}
