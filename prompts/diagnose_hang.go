package prompts

import (
	"context"
	"fmt"
	"strings"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func diagnoseHang(tools map[string]bool) server.ServerPrompt {
	prompt := mcplib.NewPrompt("diagnose_hang",
		mcplib.WithPromptDescription("Find why a distributed training job hung or died on a collective timeout: which process group, which collective, which rank, and where in the code."),
		mcplib.WithArgument("dumps", mcplib.ArgumentDescription("Directory or files of the Flight Recorder dumps (default: where TORCH_FR_DUMP_TEMP_FILE points, often /tmp or ~/.cache/torch)")),
		mcplib.WithArgument("symptom", mcplib.ArgumentDescription("What was seen, e.g. the watchdog timeout message or 'step 1200 never finished'")),
	)
	handler := func(ctx context.Context, req mcplib.GetPromptRequest) (*mcplib.GetPromptResult, error) {
		text := renderDiagnoseHang(tools, req.Params.Arguments["dumps"], req.Params.Arguments["symptom"])
		return mcplib.NewGetPromptResult("Diagnose a hung distributed job",
			[]mcplib.PromptMessage{mcplib.NewPromptMessage(mcplib.RoleUser, mcplib.NewTextContent(text))}), nil
	}
	return server.ServerPrompt{Prompt: prompt, Handler: handler}
}

// renderDiagnoseHang writes the investigation plan, one step per tool that
// exists.
func renderDiagnoseHang(tools map[string]bool, dumps, symptom string) string {
	var b strings.Builder
	b.WriteString("A distributed PyTorch job is stuck or died on a collective (NCCL/gloo watchdog) timeout. Find the root cause and prove it.\n")
	if symptom != "" {
		fmt.Fprintf(&b, "Symptom reported: %s\n", symptom)
	}
	b.WriteString("\nSteps:\n")
	step := 1
	if tools["diagnose_hang"] {
		fmt.Fprintf(&b, "%d. Call diagnose_hang first: one call gathers every source on this node and returns the job's state and ranked hypotheses. Read `state` before anything else: healthy, progressing or slow means the job is NOT hung (at most a straggler): say so and stop looking for a hang. For stalled or dead, the first hypothesis names the culprit ranks, the category and the line of code; the ranks listed as waiting for it are victims, never the cause.\n", step)
		step++
		fmt.Fprintf(&b, "%d. Weigh it: high confidence with evidence from two sources (rings and stacks) can be reported; medium or low, a young stall, or data_quality notes (missing ranks, sources that disagree) mean confirming first with the call named in the hypothesis's `confirm`, and saying what `refute` would show. With several hypotheses, say why the first outranks the others.\n", step)
		step++
	}
	if tools["run_skill"] && tools["skill:training_hang"] {
		fmt.Fprintf(&b, "%d. For the raw listings behind the verdict (each rank's last collective, calls in flight, step times), call run_skill with skill_id=\"training_hang\"; its findings are the same diagnosis.\n", step)
		step++
	}
	if tools["list_processes"] && tools["get_stacks"] {
		fmt.Fprintf(&b, "%d. Call list_processes. If it lists live ranks, the job still runs on this node: call get_stacks. Its summary says where every rank's main thread is, odd ones out first: a rank in a data loader, a checkpoint or an exception path while the others wait in a collective is the culprit. A process whose stacks came from faulthandler did not let its agent answer: it holds the GIL (stuck in C code).\n", step)
		step++
		if tools["snapshot_flight_recorder"] {
			fmt.Fprintf(&b, "%d. Call snapshot_flight_recorder for the live Flight Recorder verdict of every local rank; read it as in the next steps. If list_processes shows no live rank, the job is dead: use its dumps (next step) and query its rings (history and python.* tables).\n", step)
			step++
		}
	}
	if tools["analyze_flight_recorder"] {
		where := dumps
		if where == "" {
			where = "the directory holding the per-rank dumps (TORCH_FR_DUMP_TEMP_FILE prefix + rank; default /tmp/nccl_trace_rank_<N> or ~/.cache/torch/)"
		}
		fmt.Fprintf(&b, "%d. Call analyze_flight_recorder with paths=[%q]. Read `summary`, then the first process group: it is the most severe, and among equals the one whose pending collective is oldest (the first hang starves the others).\n", step, where)
		step++
		fmt.Fprintf(&b, "%d. Interpret the verdict of that group:\n", step)
		b.WriteString("   - MISSING_RANKS: the culprit ranks never joined collective #N while the others wait in it. Their lagging_ranks rows say whether they never enqueued it (a code path skipped it, or the rank is stuck before it: data loader, I/O, an exception) or enqueued it late.\n")
		b.WriteString("   - COLLECTIVE_TYPE_MISMATCH: ranks called different collectives at the same sequence number: a code-path divergence (a rank-dependent `if`, uneven data, a skipped layer). Compare culprit_stack with the peers.\n")
		b.WriteString("   - SIZE_OR_SYNTAX_MISMATCH / COLLECTIVE_DTYPE_MISMATCH: same collective, different shapes or dtypes: uneven batch or bucket sizes, a dtype cast on some ranks only.\n")
		b.WriteString("   - COLLECTIVE_STATE_MISMATCH: some ranks finished #N and some did not; look at the age of the unfinished side against the timeout.\n")
		b.WriteString("   - OK with kind STUCK_IN_COLLECTIVE: every rank entered the same collective and none finished: suspect the network, the communication library or a GPU, not the training code.\n")
		b.WriteString("   - UNDECIDED: some ranks left no dump; they are the first suspects (a crashed or killed process leaves none).\n")
		step++
		fmt.Fprintf(&b, "%d. Check confidence and fr_trace: when `fr_trace` is not \"agrees\", call again with detail=\"full\" to see why torch's analyzer would say otherwise, and say which you trust and why.\n", step)
		step++
		fmt.Fprintf(&b, "%d. Read data_quality: missing dumps, files that failed to decode, version skew. Say what the verdict cannot rule out.\n", step)
		step++
	} else {
		fmt.Fprintf(&b, "%d. No Flight Recorder tool is available on this server; ask the user for the per-rank dumps or the job's logs.\n", step)
		step++
	}
	fmt.Fprintf(&b, "%d. Answer in this order: whether the job is hung at all (its state), the culprit rank(s) and the category, the process group and collective (sequence number and op) where the others wait, the evidence with its sources, the code location (file:line and the line itself), the confidence and what is missing, and the next thing to check.\n", step)
	return b.String()
}
