package prompts

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// plan writes numbered steps, skipping the ones whose tool is not
// registered, so that a prompt never names a tool the server lacks.
type plan struct {
	b     strings.Builder
	tools map[string]bool
	n     int
}

func (p *plan) step(tool, format string, args ...any) {
	if tool != "" && !p.tools[tool] {
		return
	}
	p.n++
	fmt.Fprintf(&p.b, "%d. ", p.n)
	fmt.Fprintf(&p.b, format, args...)
	p.b.WriteByte('\n')
}

func (p *plan) text() string { return p.b.String() }

// skill adds a step that runs a skill, when run_skill and that skill are
// both there (the server names loaded skills "skill:<id>").
func (p *plan) skill(id, why string) {
	if p.tools["run_skill"] && p.tools["skill:"+id] {
		p.step("", "Call run_skill with skill_id=%q: %s", id, why)
	}
}

// argument checks: prompt arguments arrive as strings; a bad one is an
// error naming it, not a prompt built on nonsense.
func intArg(args map[string]string, name string) (int, bool, error) {
	v := strings.TrimSpace(args[name])
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false, argErrorf("argument %s=%q: want a non-negative integer, e.g. 1200", name, v)
	}
	return n, true, nil
}

func durationArg(args map[string]string, name string, def time.Duration) (time.Duration, error) {
	v := strings.TrimSpace(args[name])
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, argErrorf("argument %s=%q: want a duration such as 10m or 1h", name, v)
	}
	return d, nil
}

func ranksArg(args map[string]string, name string) (string, error) {
	v := strings.TrimSpace(args[name])
	if v == "" {
		return "", nil
	}
	r, err := rankset.Parse(v)
	if err != nil {
		return "", argErrorf("argument %s=%q: %v (ranks as ranges, e.g. 0-7,12)", name, v, err)
	}
	return rankset.Format(r), nil
}

func result(title, text string) *mcplib.GetPromptResult {
	return mcplib.NewGetPromptResult(title, []mcplib.PromptMessage{mcplib.NewPromptMessage(mcplib.RoleUser, mcplib.NewTextContent(text))})
}

func findStraggler(tools map[string]bool) server.ServerPrompt {
	prompt := mcplib.NewPrompt("find_straggler",
		mcplib.WithPromptDescription("Find the rank that slows the whole job down (a straggler): every rank waits for it in each collective."),
		mcplib.WithArgument("window", mcplib.ArgumentDescription("How far back to look, as a duration (default 10m)")),
		mcplib.WithArgument("ranks", mcplib.ArgumentDescription("Only these ranks, as ranges (0-7,12)")),
	)
	handler := func(ctx context.Context, req mcplib.GetPromptRequest) (*mcplib.GetPromptResult, error) {
		window, err := durationArg(req.Params.Arguments, "window", 10*time.Minute)
		if err != nil {
			return nil, err
		}
		ranks, err := ranksArg(req.Params.Arguments, "ranks")
		if err != nil {
			return nil, err
		}
		since := fmt.Sprintf("(strftime('%%s','now') - %d) * 1000000", int(window.Seconds()))
		filter := ""
		if ranks != "" {
			filter = " (ranks " + ranks + " only: filter on _rank)"
		}
		p := &plan{tools: tools}
		fmt.Fprintf(&p.b, "A distributed PyTorch job runs slower than it should. Find the straggler rank over the last %s%s and prove it.\n\nSteps:\n", window, filter)
		p.step("list_processes", "Call list_processes to see which ranks run on this node.")
		p.skill("slow_rank", "it ranks the ranks by time inside collectives and step time and names a straggler; then persistent_straggler says whether it is the same rank step after step.")
		p.step("query", "Call query with: SELECT _rank, count(*) AS steps, avg(step_duration_sec) AS avg_s, max(step_duration_sec) AS max_s FROM python.torch_step_timing WHERE timestamp > %s AND step_duration_sec >= 0 GROUP BY _rank ORDER BY avg_s DESC. Step times are similar on every rank (they wait for each other); the straggler shows in the next query.", since)
		p.step("query", "Call query with: SELECT _rank, op, count(*) AS calls, avg(duration_ms) AS avg_ms FROM python.comm_collective WHERE timestamp > %s AND duration_ms >= 0 GROUP BY _rank, op ORDER BY op, avg_ms. The straggler spends the LEAST time inside collectives (it arrives last and waits for nobody); its victims spend the most.", since)
		p.step("get_stacks", "Call get_stacks with ranks set to the suspect and two healthy ranks, a few times: where the suspect's main thread is when the others already wait (data loading, host-side work, a slow disk) is the cause.")
		p.step("describe_tables", "If a table above is missing or empty, call describe_tables to see what this node records.")
		p.step("", "Answer: the straggler rank(s), by how much (ms per step), the evidence rows, where its time goes, and what to try.")
		return result("Find a straggler rank", p.text()), nil
	}
	return server.ServerPrompt{Prompt: prompt, Handler: handler}
}

func investigateWatchdogTimeout(tools map[string]bool) server.ServerPrompt {
	prompt := mcplib.NewPrompt("investigate_watchdog_timeout",
		mcplib.WithPromptDescription("Explain a NCCL/gloo watchdog timeout (\"Watchdog caught collective operation timeout\"): which collective, which ranks never joined it, and why."),
		mcplib.WithArgument("message", mcplib.ArgumentDescription("The timeout message from the log (it names the rank, the sequence number and the op)")),
		mcplib.WithArgument("dumps", mcplib.ArgumentDescription("Where the Flight Recorder dumps are, if the job died")),
	)
	handler := func(ctx context.Context, req mcplib.GetPromptRequest) (*mcplib.GetPromptResult, error) {
		msg, dumps := strings.TrimSpace(req.Params.Arguments["message"]), strings.TrimSpace(req.Params.Arguments["dumps"])
		p := &plan{tools: tools}
		p.b.WriteString("A collective timed out (the NCCL/gloo watchdog fired). The rank that reports the timeout is usually a victim: find the rank that never joined.\n")
		if msg != "" {
			fmt.Fprintf(&p.b, "Message: %s\nRead SeqNum and OpType from it: that is the collective to explain.\n", msg)
		}
		p.b.WriteString("\nSteps:\n")
		if dumps != "" {
			p.step("analyze_flight_recorder", "Call analyze_flight_recorder with paths=[%q].", dumps)
		} else {
			p.skill("watchdog_timeout", "it takes the live Flight Recorder snapshot, analyses it and adds process-group progress per rank.")
			p.step("snapshot_flight_recorder", "If the job still runs, call snapshot_flight_recorder (every local rank).")
			p.step("analyze_flight_recorder", "If it died, call analyze_flight_recorder on the dump directory (TORCH_FR_DUMP_TEMP_FILE; by default /tmp or ~/.cache/torch).")
		}
		p.step("", "In the result, take the process group whose collective_seq_id matches the message. MISSING_RANKS names the ranks that never enqueued it; their lagging_ranks rows say how far behind they are.")
		p.step("get_stacks", "If the job still runs, call get_stacks with ranks set to the missing ranks: their main thread shows what they do instead (a data loader, a checkpoint, an exception handler, a different collective).")
		p.step("query", "Call query on history.diagnoses (SELECT created_at_us, verdict, culprit_ranks FROM history.diagnoses ORDER BY id DESC LIMIT 5) to see whether the same ranks were blamed before.")
		p.step("", "Answer: the collective (group, sequence number, op), the culprit ranks with the evidence, what they were doing, and whether raising the timeout would help (it does not when a rank skipped the collective).")
		return result("Investigate a watchdog timeout", p.text()), nil
	}
	return server.ServerPrompt{Prompt: prompt, Handler: handler}
}

func postMortem(tools map[string]bool) server.ServerPrompt {
	prompt := mcplib.NewPrompt("post_mortem",
		mcplib.WithPromptDescription("Reconstruct what a dead job was doing when it died, from what it left on disk: Flight Recorder dumps, ring tables, crash files and the history."),
		mcplib.WithArgument("dumps", mcplib.ArgumentDescription("Directory of the Flight Recorder dumps, if any")),
	)
	handler := func(ctx context.Context, req mcplib.GetPromptRequest) (*mcplib.GetPromptResult, error) {
		dumps := strings.TrimSpace(req.Params.Arguments["dumps"])
		p := &plan{tools: tools}
		p.b.WriteString("A distributed training job is dead. Reconstruct its last minutes and name the first rank that went wrong.\n\nSteps:\n")
		p.skill("post_mortem", "it reads the dead writers' rings, where each rank stopped, and the stored snapshots and diagnoses in one go.")
		p.step("list_processes", "Call list_processes with include_dead=true: exited processes that left rings or stale sockets are the job's remains.")
		p.step("query", "Call query with: SELECT schema_name, table_name, pid, writer_alive, rows_overwritten FROM probing.rings. Rings of dead writers stay readable; rows_overwritten > 0 means the oldest history is gone.")
		p.step("query", "Call query with: SELECT _rank, max(group_seq) AS last_seq, sum(duration_ms < 0) AS unfinished FROM python.comm_collective GROUP BY _rank ORDER BY last_seq. A rank with a lower last_seq, or with unfinished calls (duration_ms -1), stopped first or hung.")
		if dumps != "" {
			p.step("analyze_flight_recorder", "Call analyze_flight_recorder with paths=[%q].", dumps)
		} else {
			p.step("analyze_flight_recorder", "If Flight Recorder dumps exist (TORCH_FR_DUMP_TEMP_FILE; by default /tmp or ~/.cache/torch), call analyze_flight_recorder on them.")
		}
		p.step("query", "Call query on history (SELECT * FROM history.fr_snapshots ORDER BY id DESC LIMIT 10, and history.stack_captures): snapshots and stacks taken while the job ran, and watchdog snapshots the agent saved as it died.")
		p.step("", "Crash backtraces, if a rank died on a signal, are in <data dir>/crash/<pid>/faulthandler.txt.")
		p.step("", "Answer: the order in which ranks stopped, the first failure with its evidence, and what is unknowable from what was left (overwritten rows, missing dumps).")
		return result("Post-mortem of a dead job", p.text()), nil
	}
	return server.ServerPrompt{Prompt: prompt, Handler: handler}
}

func explainSlowStep(tools map[string]bool) server.ServerPrompt {
	prompt := mcplib.NewPrompt("explain_slow_step",
		mcplib.WithPromptDescription("Explain why one training step (or a run of steps) was slow: compute, communication, data loading, or one rank holding the others back."),
		mcplib.WithArgument("step", mcplib.ArgumentDescription("The global step number (default: the slowest recent step)")),
		mcplib.WithArgument("rank", mcplib.ArgumentDescription("The rank that reported it, if one did")),
	)
	handler := func(ctx context.Context, req mcplib.GetPromptRequest) (*mcplib.GetPromptResult, error) {
		step, hasStep, err := intArg(req.Params.Arguments, "step")
		if err != nil {
			return nil, err
		}
		rank, hasRank, err := intArg(req.Params.Arguments, "rank")
		if err != nil {
			return nil, err
		}
		p := &plan{tools: tools}
		target := "the slowest recent step"
		where := "ORDER BY step_duration_sec DESC LIMIT 20"
		if hasStep {
			target = fmt.Sprintf("global step %d", step)
			where = fmt.Sprintf("WHERE global_step BETWEEN %d AND %d ORDER BY global_step, _rank", max(step-3, 0), step+3)
		}
		fmt.Fprintf(&p.b, "Explain why %s was slow", target)
		if hasRank {
			fmt.Fprintf(&p.b, " (reported by rank %d)", rank)
		}
		p.b.WriteString(".\n\nSteps:\n")
		p.step("query", "Call query with: SELECT global_step, _rank, step_duration_sec FROM python.torch_step_timing %s. Compare the step with its neighbours and across ranks.", where)
		p.step("query", "Call query on python.comm_collective for the same steps (WHERE global_step = <step>): per _rank and op, count(*), sum(duration_ms). Time inside collectives that only some ranks have means they waited for the others.")
		p.step("query", "Call query on python.trace_event for the same time range (spans the training code recorded: data loading, checkpointing).")
		p.step("get_stacks", "If steps are slow right now, call get_stacks a few times: a main thread repeatedly in the same place names the cost.")
		p.step("", "Answer: where the time went (compute, waiting in collectives, data, I/O), which rank caused it, and the evidence rows.")
		return result("Explain a slow step", p.text()), nil
	}
	return server.ServerPrompt{Prompt: prompt, Handler: handler}
}
