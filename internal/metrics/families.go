package metrics

// The families and the one-line helpers instrumentation sites call. Each
// helper costs a label lookup and an atomic add: nothing that shows next
// to the work it measures (BenchmarkObserveOperation).

import (
	"sync"
	"time"
)

// --- the MCP server (mcp/metrics.go) ---

var (
	operationDuration = histogram("server_operation_duration_seconds",
		"MCP requests handled, by method, tool, error type and transport (OpenTelemetry's mcp.server.operation.duration).",
		OperationBuckets, "mcp_method_name", "gen_ai_tool_name", "error_type", "network_transport")
	sessionsActive = gauge("server_active_sessions",
		"MCP sessions open now (stdio: one per client; stateless HTTP registers none).")
	sessionsStarted  = plainCounter("server_sessions_started_total", "MCP sessions opened.")
	requestsInFlight = gauge("server_requests_in_flight",
		"MCP requests being handled now.")
)

// ObserveOperation records one MCP request: its method, the tool for
// tools/call ("" otherwise), errType ("" when it succeeded, "tool_error"
// for a result with isError, else ErrorType of the Go error), the
// transport ("pipe" for stdio, "tcp" for HTTP) and how long it took. The
// caller bounds method and tool to the names the server knows.
func ObserveOperation(method, tool, errType, transport string, d time.Duration) {
	operationDuration.get().WithLabelValues(clean(method), clean(tool), clean(errType), clean(transport)).Observe(d.Seconds())
}

// SessionStarted counts a session opened; SessionEnded one closed.
func SessionStarted() {
	sessionsStarted.get().Inc()
	sessionsActive.get().Inc()
}

// SessionEnded counts a session closed.
func SessionEnded() { sessionsActive.get().Dec() }

// RequestStarted counts a request in flight until RequestDone.
func RequestStarted() { requestsInFlight.get().Inc() }

// RequestDone ends what RequestStarted began.
func RequestDone() { requestsInFlight.get().Dec() }

// --- the whole job's fan-out (cluster/fanout) ---

// NodeLabelCap bounds the distinct node addresses the fan-out families
// label; the rest are counted under node="other". 4096 nodes is a large
// job; a planted store naming a million addresses still costs at most this.
const NodeLabelCap = 4096

var (
	fanoutNodes    = &capped{max: NodeLabelCap}
	fanoutCalls    = counter("fanout_calls_total", "Calls to node daemons, by node address.", "node")
	fanoutFailures = counter("fanout_failures_total",
		"Calls to node daemons that failed, by node address and kind (unreachable, timeout, auth, garbage, refused, not_daemon).", "node", "kind")
	fanoutDuration = histogram("fanout_call_duration_seconds", "Time of one call to a node daemon, by node address.",
		OperationBuckets, "node")
)

// FanoutCall records one call to the node daemon at node: kind is "" when
// it answered, else the failure's kind.
func FanoutCall(node, kind string, d time.Duration) {
	n := fanoutNodes.value(node)
	fanoutCalls.get().WithLabelValues(n).Inc()
	fanoutDuration.get().WithLabelValues(n).Observe(d.Seconds())
	if kind != "" {
		fanoutFailures.get().WithLabelValues(n, enum(kind, "unreachable", "timeout", "auth", "garbage", "refused", "not_daemon")).Inc()
	}
}

// --- the agents and the stacks' fallbacks (agent) ---

var (
	agentCalls = counter("agent_calls_total",
		"Requests to in-rank agents' control sockets, by result (ok, or the failure: timeout, refused, denied, dead, malformed, http).", "result")
	agentDuration = plainHistogram("agent_call_duration_seconds", "Time of one request to an agent's control socket.", fastBuckets)
	stackCaptures = counter("stack_captures_total",
		"Processes whose stacks were captured, by the source that answered: agent, faulthandler (the agent did not answer), proc (neither: /proc only), probing (Probing's agent).", "source")
)

// AgentCall records one request to an agent: kind is "" when it answered
// 2xx, else the agent.Error kind.
func AgentCall(kind string, d time.Duration) {
	agentCalls.get().WithLabelValues(enum(result(kind), "ok", "timeout", "refused", "denied", "dead", "malformed", "http")).Inc()
	agentDuration.get().Observe(d.Seconds())
}

// StackCapture records which source gave one process's stacks.
func StackCapture(source string) {
	stackCaptures.get().WithLabelValues(enum(source, "agent", "faulthandler", "proc", "probing")).Inc()
}

// --- SQL over the rings (storage/sqlengine) ---

var (
	sqlQueries = counter("sql_queries_total",
		"SQL queries over the rings, by result: ok, error (the SQL failed, or was cancelled) or refused (a guard or limit stopped it).", "result")
	sqlRefusals = counter("sql_refusals_total",
		"SQL queries the engine refused, by reason (read_only, too_big, memory, busy, timeout, empty, multiple).", "reason")
	sqlRows     = plainCounter("sql_rows_total", "Rows SQL queries produced (counted whole, returned or not).")
	sqlDuration = plainHistogram("sql_query_duration_seconds", "Time of one SQL query, refused ones included.", OperationBuckets)
)

// SQLQuery records one query: kind is "" when it ran, else the
// sqlengine.Error kind ("sql" and "canceled" are errors, the rest
// refusals); rows is the rows it produced.
func SQLQuery(kind string, rows int, d time.Duration) {
	res := "ok"
	switch kind {
	case "":
	case "sql", "canceled":
		res = "error"
	default:
		res = "refused"
		sqlRefusals.get().WithLabelValues(enum(kind, "read_only", "too_big", "memory", "busy", "timeout", "empty", "multiple")).Inc()
	}
	sqlQueries.get().WithLabelValues(res).Inc()
	if rows > 0 {
		sqlRows.get().Add(float64(rows))
	}
	sqlDuration.get().Observe(d.Seconds())
}

// --- Flight Recorder loads (flightrecorder) ---

var (
	frLoads    = counter("flightrecorder_loads_total", "Flight Recorder loads (a set of dump files), by result: ok or error.", "result")
	frBytes    = plainCounter("flightrecorder_load_bytes_total", "Bytes of Flight Recorder dump files read.")
	frDuration = plainHistogram("flightrecorder_load_duration_seconds", "Time of one Flight Recorder load.", OperationBuckets)
	frPeak     = gauge("flightrecorder_load_memory_peak_bytes",
		"The most memory the process held (the runtime's accounting) while any Flight Recorder load ran.")
	frPeakMu  sync.Mutex
	frPeakMax int64
)

// FlightRecorderLoad records one load: bytes read, its time, the process
// memory high-water mark seen while it ran, and whether it failed.
func FlightRecorderLoad(bytes int64, d time.Duration, peakMemory int64, failed bool) {
	frLoads.get().WithLabelValues(outcome(failed)).Inc()
	if bytes > 0 {
		frBytes.get().Add(float64(bytes))
	}
	frDuration.get().Observe(d.Seconds())
	frPeakMu.Lock()
	defer frPeakMu.Unlock()
	if peakMemory > frPeakMax {
		frPeakMax = peakMemory
		frPeak.get().Set(float64(peakMemory))
	}
}

// --- the GPU sampler (gpu) ---

var (
	gpuRounds = counter("gpu_sampler_rounds_total", "GPU sampler rounds, by result: ok, or error (NVML could not be sampled at all).", "result")
	nvmlErrs  = counter("gpu_nvml_errors_total",
		"NVML reads that failed, by reason (not_supported is not counted: many GPUs lack some fields).", "reason")
)

// GPURound records one sampler round.
func GPURound(failed bool) {
	gpuRounds.get().WithLabelValues(outcome(failed)).Inc()
}

// NVMLError records one failed NVML read; reason is a short code (the
// gpu package maps NVML's return codes to them).
func NVMLError(reason string) {
	nvmlErrs.get().WithLabelValues(enum(reason, "gpu_is_lost", "no_permission", "function_not_found", "uninitialized",
		"invalid_argument", "not_found", "timeout", "driver_not_loaded", "library_not_found", "reset_required",
		"unknown", "panic")).Inc()
}

// --- the persisted history (storage/history) ---

var (
	historyWrites = counter("history_writes_total",
		"Rows written to the persisted history, by table and result (ok or error).", "table", "result")
	historyDuration = plainHistogram("history_write_duration_seconds", "Time of one history write (its own transaction, on disk when it returns).", fastBuckets)
)

// HistoryWrite records one history insert into table.
func HistoryWrite(table string, failed bool, d time.Duration) {
	t := enum(table, "fr_snapshots", "stack_captures", "diagnoses", "audit")
	historyWrites.get().WithLabelValues(t, outcome(failed)).Inc()
	historyDuration.get().Observe(d.Seconds())
}

// outcome is the result label of a thing that either worked or failed.
func outcome(failed bool) string {
	if failed {
		return "error"
	}
	return "ok"
}
