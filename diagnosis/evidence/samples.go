package evidence

import (
	"context"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// MaxSampledRanks bounds MainSamples: more ranks than this on a node are
// not sampled again (each round asks every agent).
const MaxSampledRanks = 64

// MainSamples takes n more samples of each live rank's main thread, gap
// apart, through its agent (stacks.Thread with /proc's state joined), by
// rank. A moving job whose collectives no ring records (DDP's are issued
// from C++) shows its straggler only this way: the rank that is elsewhere
// in every sample while the others wait. Bounded by ctx; a rank that does
// not answer in a round is left out of it.
func MainSamples(ctx context.Context, opt Options, n int, gap time.Duration) map[int][]*stacks.Thread {
	found, err := agent.Discover(opt.Agents)
	if err != nil {
		return nil
	}
	var live []*agent.Agent
	for _, a := range found {
		if a.Alive && a.IsJobRank() && a.Kind != agent.KindRingOnly {
			live = append(live, a)
		}
	}
	if len(live) == 0 || len(live) > MaxSampledRanks {
		return nil
	}
	out := map[int][]*stacks.Thread{}
	for i := 0; i < n; i++ {
		select {
		case <-ctx.Done():
			return out
		case <-time.After(gap):
		}
		for _, p := range agent.CollectStacks(ctx, live, agent.StackOptions{}) {
			for j := range p.Threads {
				if p.Threads[j].IsMain && p.Source == stacks.SourceAgent {
					t := p.Threads[j]
					out[p.Rank] = append(out[p.Rank], &t)
				}
			}
		}
	}
	return out
}
