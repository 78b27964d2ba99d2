package tools

import (
	"context"
	"log/slog"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/internal/demojob"
)

// resultTypes is what each tool's handler returns. A tool missing here
// fails TestEveryResultHasModelText; the live test checks the entries of
// the tools it can call against what they really return.
var resultTypes = map[string]reflect.Type{
	"diagnose_hang":            reflect.TypeFor[DiagnoseHangResult](),
	"analyze_flight_recorder":  reflect.TypeFor[AnalyzeFlightRecorderResult](),
	"list_processes":           reflect.TypeFor[ListProcessesResult](),
	"get_stacks":               reflect.TypeFor[GetStacksResult](),
	"gpu_status":               reflect.TypeFor[GPUStatusResult](),
	"snapshot_flight_recorder": reflect.TypeFor[SnapshotFlightRecorderResult](),
	"get_config":               reflect.TypeFor[GetConfigResult](),
	"list_alerts":              reflect.TypeFor[ListAlertsResult](),
	"query":                    reflect.TypeFor[queryAnswer](),
	"describe_tables":          reflect.TypeFor[describeAnswer](),
	"list_skills":              reflect.TypeFor[ListSkillsResult](),
	"plan_skill":               reflect.TypeFor[planAnswer](),
	"run_skill":                reflect.TypeFor[runAnswer](),
	"list_cluster_nodes":       reflect.TypeFor[ListClusterNodesResult](),
	"cluster_query":            reflect.TypeFor[queryAnswer](),
	"set_config":               reflect.TypeFor[SetConfigResult](),
	"eval_python":              reflect.TypeFor[EvalPythonResult](),
}

// TestEveryResultHasModelText: every tool tools.All can register (SQL,
// skills and the whole job on) returns a result with a ModelText, so no
// tool's text content falls back to its JSON.
func TestEveryResultHasModelText(t *testing.T) {
	env := skipTPEnv(t)
	env.Cluster = fanout.NewJob(func(context.Context) ([]cluster.Node, []string, error) { return nil, nil, nil },
		fanout.NewClient("", 1), fanout.Options{Concurrency: 1, PeerTimeout: time.Second, Deadline: time.Second})
	texter := reflect.TypeFor[modelTexter]()
	seen := map[string]bool{}
	for _, d := range All(env) {
		name := d.Tool.Name
		seen[name] = true
		rt, ok := resultTypes[name]
		if !ok {
			t.Errorf("tool %s: its result type is not in resultTypes; give it a ModelText and list it", name)
			continue
		}
		if !rt.Implements(texter) {
			t.Errorf("tool %s: %v has no ModelText() string", name, rt)
		}
	}
	for name := range resultTypes {
		if !seen[name] {
			t.Errorf("resultTypes lists %s, which tools.All does not register", name)
		}
	}
}

// TestModelTextLive: the demo job (four ranks with the agent, rank 2 stuck
// in its data loader) through every tool that talks to the agents, each
// called as the skills call it and as the server does (its text content
// is the ModelText, never the JSON).
func TestModelTextLive(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3: the demo job needs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	job, err := demojob.Start(ctx, demojob.Options{Torch: "no", Python: "python3"})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Stop()
	if err := job.WaitHung(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	env := &Env{Agents: agent.Options{DataDir: job.DataDir, CtrlRoot: job.CtrlRoot}, Logger: discardLogger()}
	defs := map[string]Def{}
	for _, d := range All(env) {
		defs[d.Tool.Name] = d
	}
	pids := job.PIDs()
	call := func(name string, args map[string]any) (modelTexter, string) {
		t.Helper()
		d := defs[name]
		r, err := d.Call(ctx, args)
		if err != nil {
			t.Fatalf("%s %v: %v", name, args, err)
		}
		if got := reflect.TypeOf(r); got != resultTypes[name] {
			t.Errorf("%s returns %v; resultTypes says %v", name, got, resultTypes[name])
		}
		mt := r.(modelTexter)
		res, err := d.Handler(ctx, mcplib.CallToolRequest{Params: mcplib.CallToolParams{Name: name, Arguments: args}})
		if err != nil || res.IsError {
			t.Fatalf("%s through the handler: %v %v", name, err, ResultText(res))
		}
		if text := ResultText(res); strings.HasPrefix(text, "{") {
			t.Errorf("%s: the text content is JSON: %.200s", name, text)
		}
		return mt, mt.ModelText()
	}
	want := func(name, text string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(text, w) {
				t.Errorf("%s text lacks %q:\n%s", name, w, text)
			}
		}
	}

	r, text := call("list_processes", map[string]any{})
	sizes(t, "list_processes (4 ranks)", r)
	want("list_processes", text, "4 live process(es) with an agent (ranks 0-3)", "pid "+itoa(pids[2])+" rank 2 (local ", "alive, agent probing-mcp")

	r, text = call("get_stacks", map[string]any{})
	sizes(t, "get_stacks (4 live ranks)", r)
	if first, _, _ := strings.Cut(text, "\n"); !strings.HasPrefix(first, "main thread: ranks 0-1,3 in ") || !strings.Contains(first, "rank 2 in ⟦fake_data_loader⟧ (⟦socket_rank.py⟧:") ||
		!strings.HasSuffix(first, "← odd one out") {
		t.Errorf("get_stacks summary: %s", first)
	}
	want("get_stacks", text, "[1] ODD ONE OUT main thread, rank 2: 1 thread(s)", "Sources: agent: pid(s) ")
	r, text = call("get_stacks", map[string]any{"merge": false, "ranks": "2"})
	sizes(t, "get_stacks merge=false rank 2", r)
	want("get_stacks merge=false", text, "Per process (merge=false):", "rank 2 (pid "+itoa(pids[2])+")", "agent: 1 thread(s)", "⟦fake_data_loader⟧ ")

	r, text = call("get_config", map[string]any{"rank": 1})
	sizes(t, "get_config (all keys)", r)
	want("get_config", text, "rank 1 (pid "+itoa(pids[1])+"): ", "settable with set_config", "[settable]", " — ")
	settable := ""
	for _, k := range r.(GetConfigResult).Keys {
		if k.Key == "probing.sample_rate" && k.Settable {
			settable = k.Key
		}
	}

	r, text = call("eval_python", map[string]any{"rank": 0, "code": "print('x' * 20000)"})
	sizes(t, "eval_python (20 KB printed)", r)
	want("eval_python", text, "eval in rank 0 (pid "+itoa(pids[0])+"): ok in ", "…[+18976 bytes]\n… long lines cut (structured content: output has them whole")
	_, text = call("eval_python", map[string]any{"rank": 0, "code": "def f():\n    raise ValueError('boom')\nf()"})
	want("eval_python error", text, ": error in ", "Traceback:", "ValueError: boom")

	if settable != "" {
		r, text = call("set_config", map[string]any{"key": settable, "value": "1.0", "ranks": "0-3"})
		sizes(t, "set_config (4 ranks)", r)
		want("set_config", text, "ok: "+settable+" = 1.0 on 4 of 4 process(es).", "rank 3 (pid "+itoa(pids[3])+"): ⟦1.0⟧ (was ⟦1.0⟧)")
	} else {
		t.Errorf("get_config lists no settable probing.sample_rate:\n%s", text)
	}
	env.LogLevel = levelVar()
	_, text = call("set_config", map[string]any{"key": "mcp.loglevel", "value": "debug"})
	want("set_config server key", text, "ok: probing.mcp.loglevel = debug on this server (was info).")
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func levelVar() *slog.LevelVar { return new(slog.LevelVar) }

func itoa(n int) string { return strconv.Itoa(n) }
