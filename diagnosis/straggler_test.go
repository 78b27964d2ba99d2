package diagnosis

import (
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/evidence"
)

func TestWaitStragglers(t *testing.T) {
	var rows []evidence.CommRow
	for r := 0; r < 8; r++ {
		for i := 0; i < 40; i++ {
			d := 200.0
			if r == 5 {
				d = 30
			}
			rows = append(rows, evidence.CommRow{Rank: r, GroupSeq: int64(i + 1), DurationMS: d})
		}
	}
	slow, why := waitStragglers(rows, 0)
	if len(slow) != 1 || slow[0] != 5 || !strings.HasPrefix(why, "rank 5 waits 30 ms per collective on average over its last 32, the others a median of 200 ms") {
		t.Fatalf("%v %q", slow, why)
	}
	// The same waits in a job whose step is 1.2 s: 200 ms is under a
	// fifth of it, a rank the others barely wait for.
	if slow, _ := waitStragglers(rows, 1200*time.Millisecond); slow != nil {
		t.Errorf("waits small against the step: %v", slow)
	}
	if slow, _ := waitStragglers(rows, 800*time.Millisecond); len(slow) != 1 {
		t.Errorf("waits a quarter of the step: %v", slow)
	}
	// Everyone quick (no real waiting), or half the job "slow": no claim.
	for i := range rows {
		rows[i].DurationMS /= 100
	}
	if slow, _ := waitStragglers(rows, 0); slow != nil {
		t.Errorf("tiny waits: %v", slow)
	}
	for i := range rows {
		rows[i].DurationMS = 200
		if rows[i].Rank < 4 {
			rows[i].DurationMS = 10
		}
	}
	if slow, _ := waitStragglers(rows, 0); slow != nil {
		t.Errorf("half the job: %v", slow)
	}
}
