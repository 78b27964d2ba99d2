package tabledocs

// Python @table rings (files python.<name>). Every one starts with
// timestamp I64 µs; the dataclass fields follow in declaration order.

func stepColumns() []Column {
	return []Column{
		{"micro_step", "I64", "", "Micro-batch counter of this rank when the row was written."},
		{"local_step", "I64", "", "Optimizer step of this rank, derived as micro_step / micro_batches (integer division)."},
		{"global_step", "I64", "", "Job-wide training step (the framework's own step when Megatron or vLLM step sync is on). Align ranks on it to find the one that is behind."},
		{"micro_batches", "I64", "", "Micro-batches per optimizer step used to derive local_step (PROBING_MICRO_BATCHES, default 1)."},
	}
}

var (
	colRank      = Column{"rank", "I64", "", "Global torch.distributed rank of the writing process; -1 when it was not known."}
	colWorldSize = Column{"world_size", "I64", "", "World size seen by that rank; -1 when it was not known."}
	colRole      = Column{"role", "Str", "", "Parallel coordinates of the rank, e.g. 'dp=2,pp=1,tp=0'; '' when no role was configured."}
)

func pythonTables() []Table {
	return []Table{
		{
			Schema:      "python",
			Name:        "torch_nccl_flight_record",
			Description: "One row per entry of PyTorch's NCCL Flight Recorder buffer, copied out of this rank each time the agent takes an FR snapshot (on request, or from the watchdog-exception hook). Every snapshot copies the whole buffer again, so one collective appears once per snapshot.",
			Synonyms:    []string{"flight recorder", "FR", "FR entries", "NCCL trace", "collective records", "collective sequence", "watchdog timeout", "desync", "stuck collective", "hang"},
			KeyColumns:  []string{"rank", "snapshot_id", "pg_name", "collective_seq_id"},
			Notes: "Keep only the newest snapshot per rank (max(snapshot_id) per rank, joined back on rank and snapshot_id) before counting, or repeated snapshots multiply rows. " +
				"A rank has rows only if it snapshotted itself: a rank with no rows is missing evidence, not proof it skipped a collective. " +
				"collective_seq_id counts per process group, so compare it only within one group. " +
				"Without TORCH_NCCL_ENABLE_TIMING entries go straight from 'scheduled' to 'completed', so 'scheduled' does not mean 'not launched'. " +
				"Empty unless TORCH_NCCL_TRACE_BUFFER_SIZE (TORCH_FR_BUFFER_SIZE) > 0 was set before init_process_group, on PyTorch 2.5 or later. " +
				"A missing integer is -1 and a missing string ''.",
			Storage: storageRing,
			Columns: withTimestamp(
				Column{"snapshot_id", "I64", "ns since epoch", "Identifies the snapshot: the agent's clock when it read the recorder. Shared by every row of one snapshot; the largest per rank is that rank's newest view."},
				colRank,
				colWorldSize,
				Column{"record_id", "I64", "", "Recorder position of the entry: a per-process counter over all process groups (restarts after a recorder reset). Not comparable across ranks; -1 when absent."},
				Column{"pg_id", "Str", "", "Process-local group id from the recorder, as text (the group name when the id is 0 or missing). Often equal on all ranks, but PyTorch does not promise it; pg_name is the safer cross-rank key. Joins torch_nccl_pg_status.pg_id on the same rank."},
				Column{"pg_name", "Str", "", "Process group name ('0' for the default group, then numbers or hashes); the same on every member rank."},
				Column{"pg_desc", "Str", "", "Process group description, e.g. 'default_pg', 'tp', 'dp' or 'undefined'; '' when absent. Use it to say which parallel dimension hangs."},
				Column{"collective_seq_id", "I64", "", "Sequence number of the collective within its group; the same op has the same value on every member, so grouping by (pg_name, collective_seq_id) aligns ranks. P2P entries carry the group's current value without advancing it. -1 when absent."},
				Column{"p2p_seq_id", "I64", "", "Sequence number among the group's point-to-point ops (send/recv); -1 when absent."},
				Column{"op_id", "I64", "", "Logical op id: ops coalesced into one launch share collective_seq_id and differ here. -1 when absent."},
				Column{"profiling_name", "Str", "", "Backend and op, e.g. 'nccl:all_reduce'; P2P names carry group-local ranks, e.g. 'nccl:send 1->2' or 'nccl:recv 3<-0'. Different names on different ranks at one seq means the ranks took different code paths."},
				Column{"state", "Str", "", "'scheduled', 'started' or 'completed' as the watchdog last saw it. The oldest non-completed seq of a group is where the hang is; 'started' appears only with TORCH_NCCL_ENABLE_TIMING."},
				Column{"input_sizes", "Str", "", "JSON list of input tensor shapes, e.g. '[[1024, 4096]]'. Shapes that differ between ranks at one seq indicate a mismatch (data-dependent branch, uneven all_to_all)."},
				Column{"input_dtypes", "Str", "", "JSON list of input dtypes as PyTorch scalar names, e.g. '[\"BFloat16\"]'."},
				Column{"output_sizes", "Str", "", "JSON list of output tensor shapes."},
				Column{"output_dtypes", "Str", "", "JSON list of output dtypes."},
				Column{"time_created_ns", "I64", "ns since epoch", "When the op was enqueued on the CPU. Its age against timeout_ms says how long a stuck op has waited; -1 when absent."},
				Column{"time_discovered_started_ns", "I64", "ns since epoch", "When the watchdog noticed the kernel had started (later than the real start, sometimes much later); -1 if never noticed or timing is off."},
				Column{"time_discovered_completed_ns", "I64", "ns since epoch", "When the watchdog noticed completion (an upper bound on the real end); -1 while not completed."},
				Column{"duration_ns", "I64", "ns", "Op duration if the dump carried one. Usually -1: PyTorch reports duration_ms (and only with timing enabled), so estimate from the discovered start and completion times instead."},
				Column{"timeout_ms", "I64", "ms", "Watchdog timeout of the op's process group; -1 when absent."},
				Column{"retired", "I64", "", "1 when the op has left the watchdog's work list. retired = 1 with state other than 'completed' means the op timed out or was aborted."},
				Column{"is_p2p", "I64", "", "1 for a point-to-point op (send/recv), 0 for a collective."},
				Column{"frames", "Str", "", "JSON list of Python frames [{name, filename, line}] of the call that enqueued the op, innermost first; '' without stack traces."},
				Column{"top_frame", "Str", "", "Innermost frame as 'name (filename:line)'; '' when no frames. Quick way to see which training code issued a stuck or mismatched op."},
			),
		},
		{
			Schema:      "python",
			Name:        "torch_nccl_pg_status",
			Description: "One row per process group per FR snapshot of this rank: the last collective sequence numbers the rank enqueued, started and completed in that group. Written together with python.torch_nccl_flight_record.",
			Synonyms:    []string{"process group status", "pg status", "last completed collective", "collective progress", "FR status", "lagging rank"},
			KeyColumns:  []string{"rank", "snapshot_id", "pg_name"},
			Notes: "Keep the newest snapshot per rank first. Within one group, the rank whose last_completed_collective is lowest is the one behind; a rank whose last_enqueued_collective is below its peers never issued the next collective (a CPU-side hang or different code path) and is the usual culprit, while ranks that enqueued it but did not complete it are waiting. " +
				"last_started_collective stays -1 unless TORCH_NCCL_ENABLE_TIMING is set. Counters are -1 before the first op. " +
				"pg_name, pg_desc and ranks come from looking the local id up in the group configuration, which is keyed by group name, so they can be empty or wrong on a rank whose local ids differ from the names.",
			Storage: storageRing,
			Columns: withTimestamp(
				Column{"snapshot_id", "I64", "ns since epoch", "Snapshot this row belongs to; equals torch_nccl_flight_record.snapshot_id of the same snapshot."},
				colRank,
				colWorldSize,
				Column{"pg_id", "Str", "", "Process-local group id (the key of the recorder's pg_status map), as text."},
				Column{"pg_name", "Str", "", "Group name from the recorder's group configuration; falls back to pg_id when the group is not configured yet."},
				Column{"pg_desc", "Str", "", "Group description, e.g. 'default_pg' or 'tp'; '' when unknown."},
				Column{"ranks", "Str", "", "Member global ranks as a list literal, e.g. '[0, 1, 2, 3]'; '' when unknown."},
				Column{"last_enqueued_collective", "I64", "", "Highest collective sequence number this rank has enqueued in the group; -1 if none."},
				Column{"last_started_collective", "I64", "", "Highest sequence number seen started on the GPU; -1 if none or when timing is off."},
				Column{"last_completed_collective", "I64", "", "Highest sequence number completed; -1 if none. Compare across members: the laggard is the suspect."},
			),
		},
		{
			Schema:      "python",
			Name:        "comm_collective",
			Description: "One row per torch.distributed collective call made by the training script, recorded by the agent's wrapper around torch.distributed with the step, role and tensor it carried.",
			Synonyms:    []string{"collectives", "collective calls", "allreduce calls", "all_reduce", "communication", "torch.distributed calls", "comm time"},
			KeyColumns:  []string{"rank", "global_step", "op"},
			Notes: "duration_ms is Python wall time around the call: for async_op = 1 it only covers the launch, and even synchronous NCCL calls usually return before the GPU finishes, so it is not the collective's execution time (use nccl.coll_perf for that). " +
				"Off by default when the NCCL profiler plugin is active. The last row per rank (by timestamp) shows the last collective each rank entered; a rank whose last global_step is behind the others is the one not arriving.",
			Storage: storageRing,
			Columns: withTimestamp(append(stepColumns(),
				colRank,
				colWorldSize,
				colRole,
				Column{"op", "Str", "", "Collective name as called, e.g. 'all_reduce', 'all_gather_into_tensor', 'broadcast'."},
				Column{"group_rank", "I64", "", "Rank of the caller inside the process group used; 0 when unknown."},
				Column{"group_size", "I64", "", "Size of that process group; 0 when unknown."},
				Column{"participate_ranks", "Str", "", "JSON list of the group's global ranks, e.g. '[0, 1, 2, 3]'; '' when unknown. Identifies the group across ranks."},
				Column{"tensor_shape", "Str", "", "Shape of the communicated tensor as text, e.g. '(1024,)'; '' when unknown."},
				Column{"tensor_dtype", "Str", "", "dtype of the tensor, e.g. 'torch.bfloat16'."},
				Column{"bytes", "I64", "bytes", "Size of the communicated tensor."},
				Column{"duration_ms", "F64", "ms", "Python wall time of the call (launch-level, see notes)."},
				Column{"async_op", "I64", "", "1 when called with async_op=True (the duration then excludes the wait), else 0."},
				Column{"group_seq", "I64", "", "probing-mcp agent only: 1-based count of this process's calls on this process group; the rank with the lowest last group_seq in a group is behind. duration_ms is -1 while a call has not returned. A point-to-point call (send, recv, isend, irecv, each operation of batch_isend_irecv) does not count on its group: its group_seq counts this process's calls in that direction with that peer, so the k-th send from A to B matches B's k-th receive from A."},
				Column{"peer", "I64", "", "probing-mcp agent only: the global rank a send went to or a receive came from; -1 for collectives and for a receive from any rank."},
			)...),
		},
		{
			Schema:      "python",
			Name:        "torch_trace",
			Description: "One row per sampled module hook (pre/post forward, pre/post optimizer step) with its timing and the CUDA allocator's memory at that point, written by the module-hook profiler when PROBING_TORCH_PROFILING is on.",
			Synonyms:    []string{"torch trace", "module timing", "forward time", "layer time", "GPU memory", "allocated memory", "memory growth", "step breakdown"},
			KeyColumns:  []string{"rank", "global_step", "module", "stage"},
			Notes: "Sampled (default rate 0.05 per step) and the first complete step only discovers modules, so gaps are normal. duration is meaningful on 'post ...' rows. " +
				"Memory values are the PyTorch allocator's view in MB, not whole-device usage (see gpu.utilization). The ring is 8 MiB and wraps quickly on big models.",
			Storage: storageRing,
			Columns: withTimestamp(append(stepColumns(),
				Column{"seq", "I64", "", "Order of the hook within the step."},
				Column{"module", "Str", "", "Fully qualified module name, e.g. 'model.layers.3.mlp'."},
				Column{"stage", "Str", "", "'pre forward', 'post forward', 'pre step' or 'post step'."},
				Column{"allocated", "F64", "MB", "Memory held by tensors (torch.cuda.memory_allocated) at the hook."},
				Column{"max_allocated", "F64", "MB", "Peak allocated since the allocator's last peak reset."},
				Column{"cached", "F64", "MB", "Memory reserved by the caching allocator (allocated plus cached free blocks)."},
				Column{"max_cached", "F64", "MB", "Peak reserved memory."},
				Column{"time_offset", "F64", "s", "Seconds since the step's time anchor when the hook ran."},
				Column{"duration", "F64", "s", "Time spent in the hooked phase (meaningful on 'post ...' rows). Compare per module across ranks to find a slow layer."},
				Column{"allocated_delta", "F64", "MB", "Change in allocated since the previous hook; steady growth across steps suggests a leak."},
				Column{"max_allocated_delta", "F64", "MB", "Change in max_allocated since the previous hook."},
				colRank,
				colWorldSize,
				colRole,
			)...),
		},
		{
			Schema:      "python",
			Name:        "torch_step_timing",
			Description: "One row per training step with its wall time, written by the module-hook profiler; some steps run as 'shadow' steps with the hooks bypassed so the profiler's own overhead can be measured.",
			Synonyms:    []string{"step time", "iteration time", "step duration", "training speed", "slow step", "straggler", "profiling overhead", "shadow step"},
			KeyColumns:  []string{"rank", "global_step", "is_shadow"},
			Notes: "Needs PROBING_TORCH_PROFILING. To find a straggler compare step_duration_sec across ranks at the same global_step: in synchronous data parallel every rank waits for the slowest, so durations look alike and the straggler is better found by what it does inside the step (nccl.proxy_ops, torch_trace). " +
				"For profiler overhead, compare the median step_duration_sec of is_shadow = 0 against is_shadow = 1.",
			Storage: storageRing,
			Columns: withTimestamp(append(stepColumns(),
				colRank,
				colWorldSize,
				colRole,
				Column{"step_duration_sec", "F64", "s", "Wall time between two consecutive end-of-step hooks; probed steps include the profiler's GPU sync and flush."},
				Column{"is_shadow", "I64", "", "1 for a shadow (baseline) step with the hooks bypassed, 0 for a probed step."},
				Column{"sampled", "I64", "", "1 when the profiler sampled this step, 0 when it did not or it was a shadow step."},
				Column{"shadow_normal", "I64", "", "Probed steps per shadow cycle at the time of the row (4 by default)."},
				Column{"shadow_baseline", "I64", "", "Shadow steps per cycle at the time of the row (1 by default)."},
				Column{"sample_rate", "F64", "", "Step sampling probability in effect (0 to 1)."},
				Column{"sample_mode", "Str", "", "Sampling mode, 'random'."},
			)...),
		},
		{
			Schema:      "python",
			Name:        "trace_event",
			Description: "One row per span start, span end or point event from the agent's tracing API (the memtable span backend), written as the training code enters and leaves instrumented regions.",
			Synonyms:    []string{"trace", "spans", "span events", "timeline", "tracing", "events", "last activity"},
			KeyColumns:  []string{"trace_id", "span_id", "thread_id"},
			Notes: "Pair span_start with span_end on span_id to get durations. A span_start with no span_end, on the thread that stopped progressing, names the region a hung rank is stuck in; the newest time per rank is its last sign of life. " +
				"Written only when PROBING_SPAN_BACKENDS includes memtable (the default).",
			Storage: storageRing,
			Columns: withTimestamp(
				Column{"record_type", "Str", "", "'span_start', 'span_end' or 'event'."},
				Column{"trace_id", "I64", "", "Id shared by all spans of one trace."},
				Column{"span_id", "I64", "", "Id of the span; the join key between a span's start and end rows."},
				Column{"name", "Str", "", "Span or event name, e.g. 'forward', 'comm.all_reduce'."},
				Column{"time", "I64", "ns since epoch", "When the span started or ended or the event happened (more precise than timestamp)."},
				Column{"thread_id", "I64", "", "Python thread that recorded it."},
				Column{"parent_id", "I64", "", "span_id of the enclosing span; -1 for a root span."},
				Column{"phase", "Str", "", "Training phase such as 'forward', 'backward' or 'optimizer'; '' when not set."},
				Column{"location", "Str", "", "Caller source location when PROBING_SPAN_LOCATION is on; '' otherwise."},
				Column{"attributes", "Str", "", "JSON object of span attributes (rank, steps, user keys)."},
				Column{"event_attributes", "Str", "", "JSON object of the attributes attached to an 'event' row."},
			),
		},
		{
			Schema:      "python",
			Name:        "trace_variables",
			Description: "One row per change of a watched local variable inside a function traced by the agent's variable tracer, with the value rendered as text.",
			Synonyms:    []string{"variable trace", "watched variables", "variable changes", "local variables"},
			KeyColumns:  []string{"function_name", "variable_name"},
			Notes: "Only written when a function is traced with variable watching, so normally empty. Values are string renderings, not the objects. " +
				"Listed with timestamp first as every @table ring is; select columns by name rather than position.",
			Storage: storageRing,
			Columns: withTimestamp(
				Column{"function_name", "Str", "", "Traced function in which the variable changed."},
				Column{"filename", "Str", "", "Source file of that function."},
				Column{"lineno", "I64", "", "Line at which the change was seen."},
				Column{"variable_name", "Str", "", "Name of the variable."},
				Column{"value", "Str", "", "New value rendered as a string."},
				Column{"value_type", "Str", "", "Python type name of the value."},
			),
		},
		{
			Schema:      "python",
			Name:        "variables",
			Description: "One row per variable snapshot taken by the agent's variable tracing, tagged with the micro-step it was taken in.",
			Synonyms:    []string{"variable snapshots", "variables", "tensor values"},
			KeyColumns:  []string{"micro_step", "func", "name"},
			Notes:       "Only written when variable tracing is enabled; 4 MiB ring. value is a string rendering.",
			Storage:     storageRing,
			Columns: withTimestamp(
				Column{"micro_step", "I64", "", "Micro-batch counter when the snapshot was taken."},
				Column{"func", "Str", "", "Function the variable belongs to."},
				Column{"name", "Str", "", "Variable name."},
				Column{"value", "Str", "", "Value as text."},
			),
		},
		{
			Schema:      "python",
			Name:        "backtrace",
			Description: "The current call stack of the process's Python main thread, mixed Python and native frames, captured by the agent at the moment the table is queried; one row per frame.",
			Synonyms:    []string{"stack", "stack trace", "backtrace", "call stack", "where is it stuck", "hang stack", "py-spy"},
			KeyColumns:  []string{"depth"},
			Notes: "Virtual: only a live agent can compute it, over HTTP; there is no ring file to read here, so ask the stack tools instead. It covers the main thread only, at query time, and needs the rank's agent to respond (a rank wedged holding the GIL may not). " +
				"Across ranks, look for frames in NCCL or collective calls versus frames elsewhere (data loading, checkpointing): the rank not inside the collective is the likely culprit.",
			Storage: storageVirtual,
			Columns: []Column{
				{"ip", "Str", "", "Instruction pointer of a native frame as hex text, e.g. '0x7f3a…'; not meaningful for Python frames."},
				{"file", "Str", "", "Source file of the frame."},
				{"func", "Str", "", "Function name, e.g. 'all_reduce' or 'ncclGroupEnd'."},
				{"lineno", "I64", "", "Line number in file; may be 0 for native frames without debug info."},
				{"depth", "I64", "", "Frame depth, 0 = innermost (the frame currently executing)."},
				{"frame_type", "Str", "", "Kind of frame: 'Python', 'Native' or 'Rust'."},
			},
		},
	}
}
