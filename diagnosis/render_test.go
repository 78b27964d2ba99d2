package diagnosis

import (
	"fmt"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
)

// job1024 is a stalled 1024-rank job with tensor-parallel pairs: rank 513
// skipped its pair's all_reduce #7 and went on to the default group's, so
// 512 waits in the pair and everyone else in the default group.
func job1024() Input {
	const world = 1024
	in := Input{World: world, Ranks: map[int]*RankFacts{}}
	all := make([]string, world)
	for i := range all {
		all[i] = fmt.Sprint(i)
	}
	everyone := "[" + strings.Join(all, ", ") + "]"
	for r := 0; r < world; r++ {
		in.Ranks[r] = &RankFacts{Rank: r, Alive: true, NowNS: 1_000_000 * 1e9}
		pair := fmt.Sprintf("[%d, %d]", r&^1, r|1)
		for s := int64(1); s <= 7; s++ {
			ts := 1_000_000e6 - 600e6 + s*1e6 // µs, 10 minutes ago
			if !(r == 513 && s == 7) {
				dur := 1.0
				if s == 7 {
					dur = -1
				}
				if !(s == 7 && r != 512) {
					in.Comm = append(in.Comm, evidence.CommRow{Rank: r, Op: "all_reduce", Ranks: pair, GroupSeq: s, TimestampUS: int64(ts), DurationMS: dur})
				}
			}
			dur := 1.0
			if s == 7 {
				dur = -1
			}
			if s < 7 || r != 512 {
				in.Comm = append(in.Comm, evidence.CommRow{Rank: r, Op: "all_reduce", Ranks: everyone, GroupSeq: s, TimestampUS: int64(ts) + 500, DurationMS: dur})
			}
		}
		in.Ranks[r].Activity = &evidence.RankActivity{LastComm: 1_000_000e6 - 600e6 + 7e6 + 500}
	}
	return in
}

// TestText1024RanksIsBounded: the default answer at 1024 ranks names the
// culprit and stays under 2,000 tokens (8,000 bytes is a generous bound:
// about 4 bytes a token), and says what Bound cut.
func TestText1024RanksIsBounded(t *testing.T) {
	rep := Diagnose(job1024())
	rows, total := rep.RankRows(0, 1000)
	rep.Bound()
	text := rep.Text()
	if len(text) > 8000 {
		t.Errorf("text is %d bytes:\n%s", len(text), text)
	}
	h := rep.Hypotheses[0]
	if h.Category != CatMissing || h.Culprits != "513" {
		t.Fatalf("%s\n%s", rep.Summary, text)
	}
	for i := 0; i < 40; i++ {
		rep.DataQuality = append(rep.DataQuality, fmt.Sprintf("note %d", i))
	}
	rep.Bound()
	if text := rep.Text(); !strings.Contains(text, "… and 28 more data-quality notes") {
		t.Errorf("the data-quality cut is not said:\n%s", text)
	}
	if total != 1024 || len(rows) != 1000 || rows[512].Doing == rows[0].Doing {
		t.Errorf("rank rows: %d of %d; 513: %q", len(rows), total, rows[513].Doing)
	}
	t.Logf("%d bytes:\n%s", len(text), text)
}
