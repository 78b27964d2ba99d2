package jobtext

import (
	"strings"
	"testing"
)

// A real torchrun command line, longer than the budget: its long paths
// are cut in the middle, and every flag name is still there (a cut at the
// end lost --num-workers and --stream-… last time).
func TestArgsKeepsEveryFlag(t *testing.T) {
	argv := []string{"/opt/conda/envs/train-py311-cu121/bin/python3.11", "-u",
		"/mnt/shared/projects/llm-pretrain/experiments/2024-11-run42/scripts/train_gpt_distributed.py",
		"--config=/mnt/shared/projects/llm-pretrain/experiments/2024-11-run42/configs/gpt3-1.3b-dp8-tp2.yaml",
		"--data-path", "/mnt/datasets/the-pile/tokenized/gpt2-bpe/train/shard-00000-of-01024.bin",
		"--micro-batch-size", "4", "--num-workers", "8", "--stream-checkpoints", "--save", "/mnt/ckpt/run42"}
	for _, n := range []int{120, 200} {
		got := Args(argv, n)
		if len(got) > n {
			t.Errorf("n=%d: %d bytes: %s", n, len(got), got)
		}
		for _, f := range []string{"-u", "--config=", "--data-path", "--micro-batch-size 4", "--num-workers 8", "--stream-checkpoints", "--save"} {
			if !strings.Contains(got, f) {
				t.Errorf("n=%d: %q lost: %s", n, f, got)
			}
		}
		// With room, a path keeps its head and its file's name.
		if n == 200 && (!strings.Contains(got, "…") || !strings.Contains(got, "distributed.py ") || !strings.HasPrefix(got, "/opt/") || !strings.Contains(got, " /mnt/ckpt/run42")) {
			t.Errorf("n=%d: paths not cut in the middle: %s", n, got)
		}
		t.Logf("n=%d: %s", n, got)
	}
	// A short line is the line.
	if got := Args([]string{"python", "train.py", "--lr", "3e-4"}, 120); got != "python train.py --lr 3e-4" {
		t.Errorf("short: %q", got)
	}
	// Flags alone past the budget: cut at the end, and said.
	many := strings.Fields(strings.Repeat("--flag-number-x ", 20))
	if got := Args(many, 100); len(got) > 100+len(cutMark(1000)) || !strings.Contains(got, "…[+") {
		t.Errorf("flags only: %q", got)
	}
	// Invisible runes are escaped before the budget is counted.
	if got := Args([]string{"python", "a\u202eb.py"}, 100); strings.ContainsRune(got, '\u202e') {
		t.Errorf("bidi kept: %q", got)
	}
}
