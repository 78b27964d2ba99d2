package evidence

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
)

// TestGatherReadsDeadRanksDumps: a dead job's ranks left Flight Recorder
// dumps where their identities say (<prefix><rank>); the post-mortem
// bundle analyses them. A dump that another user could have written is
// not used, and said.
func TestGatherReadsDeadRanksDumps(t *testing.T) {
	data := t.TempDir()
	if err := exec.Command("cp", "-a", "../../testdata/jobs/real/skip_tp/.", data).Run(); err != nil {
		t.Fatal(err)
	}
	synth := t.TempDir()
	if err := frsynth.Write(synth, frsynth.Spec{Ranks: 8, Entries: 50, Fault: frsynth.Fault{Kind: "size", Rank: 3, Seq: 40}}); err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join(data, "[0-9]*"))
	if len(dirs) != 8 {
		t.Fatalf("%d pid dirs", len(dirs))
	}
	var loose string
	for _, d := range dirs {
		idPath := filepath.Join(d, ".identity.json")
		b, err := os.ReadFile(idPath)
		if err != nil {
			t.Fatal(err)
		}
		var id map[string]any
		if err := json.Unmarshal(b, &id); err != nil {
			t.Fatal(err)
		}
		id["fr_dump_prefix"] = filepath.Join(d, "fr_dump_rank_")
		b, _ = json.Marshal(id)
		if err := os.WriteFile(idPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
		rank := int(id["rank"].(float64))
		dump := filepath.Join(d, "fr_dump_rank_"+strconv.Itoa(rank))
		if err := os.Rename(filepath.Join(synth, "nccl_trace_rank_"+strconv.Itoa(rank)), dump); err != nil {
			t.Fatal(err)
		}
		if rank == 6 {
			loose = dump
			if err := os.Chmod(dump, 0o666); err != nil {
				t.Fatal(err)
			}
		}
	}
	b := Gather(context.Background(), Options{Agents: agent.Options{DataDir: data, CtrlRoot: t.TempDir()}})
	if b.FR == nil || !slices.Equal(b.FRRanks, []int{0, 1, 2, 3, 4, 5, 7}) {
		t.Fatalf("FR ranks %v, report %v; problems %v", b.FRRanks, b.FR != nil, b.Problems)
	}
	if b.FR.Verdict != "SIZE_OR_SYNTAX_MISMATCH" {
		t.Errorf("verdict %s: %s", b.FR.Verdict, b.FR.Summary)
	}
	said := false
	for _, p := range b.Problems {
		said = said || (strings.Contains(p, loose) && strings.Contains(p, "writable by every user"))
	}
	if !said {
		t.Errorf("the world-writable dump is not said: %v", b.Problems)
	}
}
