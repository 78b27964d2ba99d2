package tools

import (
	"fmt"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/jobtext/jobtexttest"
)

// TestAgentsTextCuts: the agents' tools' texts on what the live demo job
// cannot show (TestModelTextLive covers that): hundreds of processes,
// untrusted entries and other jobs' agents, one key read, a deep
// traceback. Every cut says what was left out and where it is.
func TestAgentsTextCuts(t *testing.T) {
	lp := ListProcessesResult{Summary: "300 live process(es) with an agent (ranks 0-299); 1 untrusted entr(ies) in the shared directories", Truncated: true,
		Untrusted:    []UntrustedView{{PID: 4242, UID: 1001, Alive: true, Reason: "pid dir owned by uid 1001, not the process's owner"}},
		OtherDataDir: []OtherDataDirView{{PID: 5151, DataDir: "/scratch/other/data"}}}
	for r := 0; r < maxProcesses; r++ {
		lp.Processes = append(lp.Processes, ProcessView{PID: 1000 + r, Rank: r, LocalRank: r % 8, WorldSize: 300, Kind: "probing-mcp", Alive: true, Rings: 3,
			Command: "/opt/conda/envs/train/bin/python3 /home/u/train.py --config big.yaml"})
	}
	_, n := sizes(t, "list_processes (256 of 300)", lp)
	text := lp.ModelText()
	for _, want := range []string{"300 live process(es)", "  pid 1000 rank 0 (local 0, world 300): alive, agent probing-mcp, 3 ring(s); cmd: ⟦python3 /home/u/train.py --config big.yaml⟧",
		"… 224 more process(es) in structured content: processes", "other data dir: pid 5151 writes to ⟦/scratch/other/data⟧",
		"untrusted: pid 4242 uid 1001 alive true: pid dir owned", "Cut: over 256 entries per list"} {
		if !strings.Contains(text, want) {
			t.Errorf("list_processes text lacks %q:\n%s", want, text)
		}
	}
	if n > 5<<10 {
		t.Errorf("list_processes text %d bytes", n)
	}

	gc := GetConfigResult{PID: 77, Rank: -1, Values: map[string]string{"probing.sample_rate": "0.5"}}
	if text := gc.ModelText(); text != "pid 77: 1 config key(s).\n  probing.sample_rate = ⟦0.5⟧\n" {
		t.Errorf("get_config one key: %q", text)
	}

	ev := EvalPythonResult{PID: 9, Rank: 3, Status: "error", DurationMS: 2.4}
	for i := 0; i < 40; i++ {
		ev.Traceback = append(ev.Traceback, fmt.Sprintf("  File \"x.py\", line %d, in f%d\n", i, i))
	}
	ev.Traceback = append(ev.Traceback, "RecursionError: maximum recursion depth exceeded\n")
	text = ev.ModelText()
	for _, want := range []string{"eval in rank 3 (pid 9): error in 2 ms.\n(no output)\nTraceback:\n  … 11 earlier line(s) cut", "RecursionError: maximum recursion depth exceeded"} {
		if !strings.Contains(text, want) {
			t.Errorf("eval_python text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "in f10⟧") || !strings.Contains(text, "in f39⟧") {
		t.Errorf("the innermost lines are the ones kept:\n%s", text)
	}
}

// TestAgentsTextHostile: issue 23. A command line, a role, a data dir, a
// config value and an eval's output are the job's: each is quoted,
// escaped and bounded in the text, whatever the job put there.
func TestAgentsTextHostile(t *testing.T) {
	h := jobtexttest.Hostile()
	lp := ListProcessesResult{Summary: "2 live process(es)", OtherDataDir: []OtherDataDirView{{PID: 5, DataDir: h}}}
	for r := 0; r < 2; r++ {
		lp.Processes = append(lp.Processes, ProcessView{PID: 10 + r, Rank: r, Kind: "probing-mcp", Alive: true, Role: h, Torch: h, Command: h, Ended: "exited after " + jobtext.Quote(h, jobtext.Message)})
	}
	jobtexttest.Check(t, "list_processes", lp.ModelText(), 4<<10)
	gc := GetConfigResult{PID: 7, Rank: 1, Values: map[string]string{h: h, "probing.x": h}}
	jobtexttest.Check(t, "get_config", gc.ModelText(), 2<<10)
	gc = GetConfigResult{PID: 7, Rank: 1, Keys: []agent.ConfigKey{{Key: h, Value: h, Doc: h}}}
	jobtexttest.Check(t, "get_config keys", gc.ModelText(), 2<<10)
	ev := EvalPythonResult{PID: 9, Rank: 3, Status: "error", Output: h + "\n" + h, Traceback: []string{h, h + "\n"}}
	jobtexttest.Check(t, "eval_python", ev.ModelText(), 40<<10)
	sc := SetConfigResult{Status: "ok", Key: "probing.x", Value: "1", Processes: []ProcessSet{{PID: 1, Rank: 0, Value: h, Previous: h}, {PID: 2, Rank: 1, Error: h}}}
	jobtexttest.Check(t, "set_config", sc.ModelText(), 2<<10)
}

// TestListProcessesCommandKeepsFlags: a long torchrun-launched command
// line is cut in its long paths, not at its end: every flag of the job
// (the ones that tell two runs apart) is in the text and in the
// structured content, each within its bound.
func TestListProcessesCommandKeepsFlags(t *testing.T) {
	argv := []string{"/mnt/shared/envs/llm-train-py311-cu124/bin/python3.11", "-u",
		"/mnt/shared/projects/llm-pretrain/experiments/2024-11-run42/megatron/pretrain_gpt.py",
		"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
		"--data-path", "/mnt/datasets/the-pile/tokenized/gpt2-bpe/pile_text_document",
		"--num-workers", "8", "--stream-dataset", "--save=/mnt/ckpt/llm-pretrain/run42"}
	a := &agent.Agent{PID: 4242, Kind: "probing-mcp", Alive: true, Command: argv}
	v := processView(a)
	lp := ListProcessesResult{Summary: "1 live process(es)", Processes: []ProcessView{v}}
	text := lp.ModelText()
	line := text[strings.Index(text, "cmd: ")+len("cmd: "):]
	line = line[:strings.IndexByte(line, '\n')]
	t.Logf("text: %s\nstructured: %s", line, v.Command)
	if len(line) > maxTextCommand+len(jobtext.Open+jobtext.Close) || len(v.Command) > maxCommand {
		t.Errorf("over the bounds: text %d bytes, structured %d", len(line), len(v.Command))
	}
	for _, s := range []string{line, v.Command} {
		for _, f := range []string{"-u ", "--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 2", "--data-path ", "--num-workers 8", "--stream-dataset", "--save="} {
			if !strings.Contains(s, f) {
				t.Errorf("%q lost: %s", f, s)
			}
		}
	}
	if !strings.HasPrefix(line, "⟦python3.11 -u ") || !strings.Contains(v.Command, "_gpt.py") {
		t.Errorf("text %s, structured %s", line, v.Command)
	}
}

// The ranks of one launch share their command line: the text says it once.
func TestListProcessesSameCommandOnce(t *testing.T) {
	var lp ListProcessesResult
	for r := range 4 {
		lp.Processes = append(lp.Processes, ProcessView{PID: 10 + r, Rank: r, Kind: "probing-mcp", Alive: true, Command: "/usr/bin/python3 train.py --steps 100"})
	}
	lp.Processes[3].Command += " --resume"
	text := lp.ModelText()
	if strings.Count(text, "cmd: ⟦python3 train.py --steps 100⟧") != 1 || strings.Count(text, "cmd: as above") != 2 || !strings.Contains(text, "cmd: ⟦python3 train.py --steps 100 --resume⟧") {
		t.Errorf("text:\n%s", text)
	}
}

// Long lines (command lines that all differ, endings) stop the list near
// 2,000 tokens, and the text says where the rest is.
func TestListProcessesTextBounded(t *testing.T) {
	var lp ListProcessesResult
	for r := range 32 {
		lp.Processes = append(lp.Processes, ProcessView{PID: 100 + r, Rank: r, Kind: "probing-mcp",
			Command: fmt.Sprintf("/usr/bin/python3 /work/run%d/%s.py --seed %d", r, strings.Repeat("x", 300), r),
			Ended:   "exited with code 1 after " + strings.Repeat("a long RuntimeError message ", 10)})
	}
	text := lp.ModelText()
	if len(text) > 8000 || !strings.Contains(text, "more process(es) in structured content: processes") {
		t.Errorf("%d bytes:\n%s", len(text), text)
	}
}
