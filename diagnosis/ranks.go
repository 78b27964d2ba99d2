package diagnosis

import (
	"fmt"
	"sort"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// RankRow is one rank in the paged per-rank listing.
type RankRow struct {
	Rank  int    `json:"rank"`
	Doing string `json:"doing"`
}

// RankRows pages the per-rank listing (rank order): offset and limit, and
// how many there are in all.
func (r *Report) RankRows(offset, limit int) ([]RankRow, int) {
	ranks := make([]int, 0, len(r.doing))
	for k := range r.doing {
		ranks = append(ranks, k)
	}
	sort.Ints(ranks)
	total := len(ranks)
	if offset >= total {
		return []RankRow{}, total
	}
	ranks = ranks[offset:min(total, offset+limit)]
	out := make([]RankRow, len(ranks))
	for i, k := range ranks {
		out[i] = RankRow{Rank: k, Doing: r.doing[k]}
	}
	return out, total
}

// storyDoing says, for each rank of a stalled or dead job, where it is in
// the wait-for picture, from its view (story.go): in which collective and
// whom it waits for, outside any (and at which frame), dead, or unknown.
func storyDoing(st map[int]*rankStory) map[int]string {
	out := make(map[int]string, len(st))
	for r, s := range st {
		out[r] = s.Doing()
	}
	return out
}

// movingDoing is the per-rank line of a job that moves.
func movingDoing(in Input, js JobState) map[int]string {
	slow := map[int]bool{}
	for _, r := range js.Slow {
		slow[r] = true
	}
	out := map[int]string{}
	for r, f := range in.Ranks {
		switch {
		case !f.Alive:
			out[r] = "dead"
			if f.Ending != "" {
				out[r] += ": " + f.Ending
			}
		case slow[r]:
			out[r] = "stepping, far slower than the rest"
		case js.Threshold > 0 && js.Idle[r] >= js.Threshold:
			out[r] = fmt.Sprintf("idle for over %s", js.Threshold.Round(1e6))
		default:
			out[r] = "stepping"
		}
	}
	return out
}

// groupDoing merges ranks that do the same thing into one line each: the
// smallest groups (the odd ones out) first.
func groupDoing(doing map[int]string) []RankGroup {
	by := map[string][]int{}
	for r, s := range doing {
		by[s] = append(by[s], r)
	}
	out := make([]RankGroup, 0, len(by))
	first := map[string]int{}
	for s, rs := range by {
		sort.Ints(rs)
		first[s] = rs[0]
		out = append(out, RankGroup{Ranks: rankset.Format(rs), Count: len(rs), Doing: s})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count < out[j].Count
		}
		return first[out[i].Doing] < first[out[j].Doing]
	})
	return out
}

// oneLine keeps a rendered value on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
