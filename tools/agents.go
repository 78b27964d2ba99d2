package tools

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Target picks processes by pid or rank; both empty means every live
// agent on this node.
type Target struct {
	PIDs  []int  `json:"pids,omitempty" jsonschema_description:"Process ids (from list_processes)"`
	Ranks string `json:"ranks,omitempty" jsonschema_description:"Ranks as ranges, e.g. 0-3,7"`
}

// agentsFor resolves a target into this node's agents (the tools that
// talk to one process: get_config, set_config, eval_python).
func agentsFor(env *Env, t Target) ([]*agent.Agent, []*agent.Agent, error) {
	picked, all, err := env.node().Select(evidence.Selection{PIDs: t.PIDs, Ranks: t.Ranks})
	return picked, all, scopeError(err)
}

// one resolves a target that must name exactly one process.
func one(env *Env, pid int, rank *int) (*agent.Agent, error) {
	t := Target{}
	switch {
	case pid > 0 && rank != nil:
		return nil, userErrorf("pass pid or rank, not both")
	case pid > 0:
		t.PIDs = []int{pid}
	case rank != nil:
		t.Ranks = fmt.Sprint(*rank)
	default:
		return nil, userErrorf("pass the pid or the rank of the process (list_processes shows them)")
	}
	as, _, err := agentsFor(env, t)
	if err != nil {
		return nil, err
	}
	if len(as) != 1 {
		return nil, userErrorf("rank %d matches %d processes on this node; pass pid instead", *rank, len(as))
	}
	if !as[0].Alive {
		return nil, userErrorf("pid %d is not running (its agent left a stale socket or identity)", as[0].PID)
	}
	return as[0], nil
}

// agentError turns a failed agent call into a message the model can act on.
func agentError(err error) error {
	var ae *agent.Error
	if errors.As(err, &ae) {
		switch ae.Kind {
		case "http":
			if ae.Status == 403 || ae.Status == 400 || ae.Status == 404 {
				return &UserError{msg: ae.Error()}
			}
		case "timeout":
			return &UserError{msg: ae.Error() + "; get_stacks still works on a wedged process (faulthandler and /proc)"}
		default:
			return &UserError{msg: ae.Error()}
		}
	}
	return err
}

// ListProcessesParams are the arguments of list_processes.
type ListProcessesParams struct {
	IncludeDead bool `json:"include_dead,omitempty" jsonschema_description:"Also list exited processes that left data"`
}

// ProcessView is one process on this node.
type ProcessView struct {
	PID       int    `json:"pid"`
	Rank      int    `json:"rank"`
	LocalRank int    `json:"local_rank"`
	WorldSize int    `json:"world_size"`
	Role      string `json:"role,omitempty"`
	Kind      string `json:"agent"`
	Alive     bool   `json:"alive"`
	Stale     bool   `json:"stale_socket,omitempty"`
	Command   string `json:"command,omitempty"`
	Rings     int    `json:"rings"`
	Torch     string `json:"torch,omitempty"`
	Eval      bool   `json:"eval_allowed,omitempty"`
	// Ended says how the process ended (or that its main thread did), from
	// what the agent recorded: exit code or signal, the uncaught exception
	// and where it was raised.
	Ended string `json:"ended,omitempty"`
	// argv is the command line as the process has it, for the text's own
	// cut (nil when the view came from elsewhere: Command is split).
	argv []string
}

// ListProcessesResult lists them, ranks first.
type ListProcessesResult struct {
	Summary   string        `json:"summary"`
	Processes []ProcessView `json:"processes"`
	Omitted   int           `json:"dead_omitted,omitempty"`
	// OtherDataDir: live agents that write to another data dir (another
	// job or setup): left out of every default fan-out.
	OtherDataDir []OtherDataDirView `json:"other_data_dir,omitempty"`
	// Untrusted: what the shared data dir or control root holds that may
	// not speak for the process it names (another user's files or job):
	// never called, signalled or counted as a rank.
	Untrusted []UntrustedView `json:"untrusted,omitempty"`
	Truncated bool            `json:"truncated"`
}

// UntrustedView is one untrusted entry and why.
type UntrustedView struct {
	PID    int    `json:"pid"`
	UID    int    `json:"uid"`
	Alive  bool   `json:"alive"`
	Reason string `json:"reason"`
}

// OtherDataDirView is a live agent outside our data dir.
type OtherDataDirView struct {
	PID     int    `json:"pid"`
	DataDir string `json:"data_dir"`
}

const maxProcesses = 256

func listProcesses(env *Env) Def {
	tool := mcplib.NewTool("list_processes",
		mcplib.WithToolTitle("List training processes"),
		mcplib.WithDescription("Use to see which training processes this node has: pid, rank, role, liveness, command, ring tables. include_dead adds the exited ones and how each ended."),
		schemas[ListProcessesParams, ListProcessesResult](env),
		hints(true, false, true, false),
	)
	h, call := typed(func(ctx context.Context, p ListProcessesParams) (ListProcessesResult, error) {
		all, err := agent.Discover(env.Agents)
		if err != nil {
			return ListProcessesResult{}, err
		}
		res := ListProcessesResult{Processes: []ProcessView{}}
		var ranks []int
		alive, stale := 0, 0
		for _, a := range all {
			if a.Untrusted != "" {
				if len(res.Untrusted) < maxProcesses {
					res.Untrusted = append(res.Untrusted, UntrustedView{PID: a.PID, UID: a.UID, Alive: a.Alive, Reason: a.Untrusted})
				} else {
					res.Truncated = true
				}
				continue
			}
			if a.Alive && a.OtherDataDir != "" {
				if len(res.OtherDataDir) < maxProcesses {
					res.OtherDataDir = append(res.OtherDataDir, OtherDataDirView{PID: a.PID, DataDir: a.OtherDataDir})
				} else {
					res.Truncated = true
				}
				continue
			}
			if a.Alive {
				alive++
				if r := a.Rank(); r >= 0 {
					ranks = append(ranks, r)
				}
			}
			if a.Stale {
				stale++
			}
			if !a.Alive && !p.IncludeDead {
				res.Omitted++
				continue
			}
			if len(res.Processes) == maxProcesses {
				res.Truncated = true
				continue
			}
			res.Processes = append(res.Processes, processView(a))
		}
		sort.Ints(ranks)
		res.Summary = fmt.Sprintf("%d live process(es) with an agent (ranks %s)", alive, orDash(rankset.Format(ranks)))
		if res.Omitted > 0 {
			res.Summary += fmt.Sprintf("; %d exited (%d with a stale socket): include_dead lists them", res.Omitted, stale)
		}
		if n := len(res.Untrusted); n > 0 {
			res.Summary += fmt.Sprintf("; %d untrusted entr(ies) in the shared directories (another user's files or job, e.g. pid %d: %s): never called or counted as ranks",
				n, res.Untrusted[0].PID, res.Untrusted[0].Reason)
		}
		if n := len(res.OtherDataDir); n > 0 {
			res.Summary += fmt.Sprintf("; %d other agent process(es) write to another data dir (another job, or set PROBING_DATA_DIR to theirs): left out unless named by pid", n)
		}
		return res, nil
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "the processes on this node with an agent: pid, rank, liveness",
		Doc:     "The processes on this node with an agent: pid, rank, local rank, role, liveness, command, rings. Dead ones (stale sockets, rings left behind) on request."}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// maxCommand bounds a command line in the structured content (the text's
// is maxTextCommand).
const maxCommand = 200

func processView(a *agent.Agent) ProcessView {
	v := ProcessView{PID: a.PID, Rank: -1, LocalRank: -1, WorldSize: -1, Kind: a.Kind, Alive: a.Alive, Stale: a.Stale, Rings: a.Rings}
	if id := a.Identity; id != nil {
		v.Rank, v.LocalRank, v.WorldSize, v.Eval = id.Rank, id.LocalRank, id.WorldSize, id.EvalAllowed
		v.Role, v.Torch = jobtext.Clip(id.Role, jobtext.Name), jobtext.Clip(id.Torch, jobtext.Name) // the job's words
	}
	v.Command, v.argv = jobtext.Args(a.Command, maxCommand), a.Command
	v.Ended = a.Ending.Summary(a.Alive)
	return v
}

// GetConfigParams are the arguments of get_config.
type GetConfigParams struct {
	PID  int    `json:"pid,omitempty" jsonschema:"minimum=0" jsonschema_description:"Process id"`
	Rank *int   `json:"rank,omitempty" jsonschema:"minimum=0" jsonschema_description:"Global rank (instead of pid)"`
	Key  string `json:"key,omitempty" jsonschema_description:"One key; empty: every key"`
}

// GetConfigResult is the process's config.
type GetConfigResult struct {
	PID    int               `json:"pid"`
	Rank   int               `json:"rank"`
	Values map[string]string `json:"values"`
	Keys   []agent.ConfigKey `json:"keys,omitempty"`
}

func getConfig(env *Env) Def {
	tool := mcplib.NewTool("get_config",
		mcplib.WithToolTitle("Read agent config"),
		mcplib.WithDescription("Use to read one training process's probing.* runtime config: one key, or every key with its doc and whether set_config can change it."),
		schemas[GetConfigParams, GetConfigResult](env),
		hints(true, false, true, false),
	)
	h, call := typed(func(ctx context.Context, p GetConfigParams) (GetConfigResult, error) {
		a, err := one(env, p.PID, p.Rank)
		if err != nil {
			return GetConfigResult{}, err
		}
		res := GetConfigResult{PID: a.PID, Rank: a.Rank()}
		if p.Key == "" && a.Kind == agent.KindOurs {
			keys, err := agent.ConfigKeys(ctx, a)
			if err != nil {
				return res, agentError(err)
			}
			res.Keys, res.Values = keys, map[string]string{}
			for _, k := range keys {
				res.Values[k.Key] = k.Value
			}
			return res, nil
		}
		res.Values, err = agent.Config(ctx, a, p.Key)
		if err != nil {
			return res, agentError(err)
		}
		return res, nil
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "a process's runtime config (probing.* keys)",
		Doc:     "A process's `probing.*` config, each key with its doc."}
}

// EvalPythonParams are the arguments of eval_python.
type EvalPythonParams struct {
	PID     int    `json:"pid,omitempty" jsonschema:"minimum=0" jsonschema_description:"Process id"`
	Rank    *int   `json:"rank,omitempty" jsonschema:"minimum=0" jsonschema_description:"Global rank (instead of pid)"`
	Code    string `json:"code" jsonschema:"minLength=1" jsonschema_description:"Python run in the process's __main__ (at most 4 MiB); a final expression's value is printed"`
	Timeout int    `json:"timeout,omitempty" jsonschema:"minimum=0,maximum=300" jsonschema_description:"Seconds to wait (default 10); the code keeps running after it"`
}

// EvalPythonResult is what the code printed.
type EvalPythonResult struct {
	PID        int      `json:"pid"`
	Rank       int      `json:"rank"`
	Status     string   `json:"status"`
	Output     string   `json:"output"`
	Traceback  []string `json:"traceback,omitempty"`
	DurationMS float64  `json:"duration_ms"`
}

func evalPython(env *Env) Def {
	tool := mcplib.NewTool("eval_python",
		mcplib.WithToolTitle("Run Python in a training process"),
		mcplib.WithDescription("Use to look inside a live training process when no other tool can: runs Python in its __main__ through its agent (the job's own user only) and returns stdout/stderr or the traceback. Unless the job opted out (PROBING_ALLOW_EVAL=0). Audited."),
		schemas[EvalPythonParams, EvalPythonResult](env),
		hints(false, true, false, false),
	)
	h, call := typed(func(ctx context.Context, p EvalPythonParams) (EvalPythonResult, error) {
		if strings.TrimSpace(p.Code) == "" {
			return EvalPythonResult{}, userErrorf("code is empty: pass the Python source to run")
		}
		if len(p.Code) > agent.MaxEvalCode {
			return EvalPythonResult{}, userErrorf("code is %d bytes; the agent takes at most %d (4 MiB): send a shorter program", len(p.Code), agent.MaxEvalCode)
		}
		timeout := 10 * time.Second
		if p.Timeout > 0 {
			timeout = time.Duration(p.Timeout) * time.Second
		}
		a, err := one(env, p.PID, p.Rank)
		if err != nil {
			return EvalPythonResult{}, err
		}
		// The identity says whether the agent will refuse (the job's
		// opt-out, or an agent from before the server's switch sufficed):
		// say so without calling it.
		if why := agent.EvalRefusal(a); why != "" {
			return EvalPythonResult{}, userErrorf("pid %d: %s", a.PID, why)
		}
		r, err := agent.Eval(ctx, a, p.Code, timeout)
		if err != nil {
			return EvalPythonResult{}, agentError(err)
		}
		return EvalPythonResult{PID: a.PID, Rank: a.Rank(), Status: r.Status, Output: r.Output, Traceback: r.Traceback, DurationMS: r.DurationMS}, nil
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call, Write: true,
		Summary: "run Python inside a training process (audited)",
		Doc:     "Run Python inside one process (stdout, traceback, timeout). Only registered when writes are allowed, and only where the agent allows eval; audited."}
}
