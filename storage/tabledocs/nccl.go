package tabledocs

// nccl.* rings, written inside the training process by Probing's NCCL
// profiler plugin (NCCL_PROFILER_PLUGIN). Times are ns, not µs.

const ncclUnsignedNote = "comm_hash, seq and the other U64 columns are unsigned 64-bit: compare comm_hash for equality only, and CAST them to BIGINT when sending SQL to a Probing agent, whose HTTP API otherwise returns them as null."

func ncclRankColumns() []Column {
	return []Column{
		{"rank", "I32", "", "Global torch.distributed rank of the process; -1 when unknown."},
		{"tp_rank", "I32", "", "Tensor-parallel rank from the role settings; -1 when unknown."},
		{"pp_rank", "I32", "", "Pipeline-parallel rank; -1 when unknown."},
		{"dp_rank", "I32", "", "Data-parallel rank; -1 when unknown."},
	}
}

var colCommHash = Column{"comm_hash", "U64", "", "NCCL communicator id, the same on every member rank; with seq it identifies one collective across ranks."}

func ncclTables() []Table {
	return []Table{
		{
			Schema:      "nccl",
			Name:        "proxy_ops",
			Description: "One row per finished NCCL proxy operation (one channel's send to, or receive from, one peer within a collective or P2P op), written by the NCCL profiler plugin with the time spent in each wait state.",
			Synonyms:    []string{"proxy ops", "NCCL wait breakdown", "culprit", "victim", "straggler", "slow rank", "send wait", "recv wait", "network wait", "slow link"},
			KeyColumns:  []string{"comm_hash", "seq", "rank", "peer"},
			Notes: "Only finished ops are written: a hung op never gets a row here (use nccl.inflight_ops). " +
				"For one collective (comm_hash, seq): a rank with large send_gpu_wait_ns had its own GPU late to produce the data, which makes it the culprit; ranks with large recv_wait_ns were waiting for a peer and are victims, and the peer they wait on most is the suspect. " +
				"ts is in ns, unlike the µs of python, cpu and gpu tables. " + ncclUnsignedNote +
				" Check nccl.profiler_counters before trusting an absence of rows.",
			Storage: storageRing,
			Columns: append([]Column{
				{"ts", "I64", "ns since epoch", "Event time of the op; the ring's time index."},
			}, append(ncclRankColumns(),
				colCommHash,
				Column{"coll_func", "Str", "", "NCCL operation, e.g. 'AllReduce', 'AllGather', 'ReduceScatter', 'Send', 'Recv'."},
				Column{"seq", "U64", "", "NCCL's own per-communicator operation count; do not assume it equals PyTorch's collective_seq_id."},
				Column{"channel_id", "I32", "", "NCCL channel that carried this part of the op."},
				Column{"peer", "I32", "", "Rank this proxy exchanged data with, as NCCL numbers it within the communicator (equal to the global rank only for the world communicator)."},
				Column{"is_send", "I32", "", "1 for a send proxy, 0 for a receive proxy."},
				Column{"n_steps", "I32", "count", "Number of proxy steps (network chunks) folded into this row."},
				Column{"trans_bytes", "U64", "bytes", "Bytes transferred by the op."},
				Column{"send_gpu_wait_ns", "I64", "ns", "Send side: time waiting for this rank's own GPU kernel to hand over data. Culprit signal: large on one rank means its GPU was late."},
				Column{"send_peer_wait_ns", "I64", "ns", "Send side: time waiting for the receiver to grant buffer credits (clear to send); large means the receiving peer drains slowly. Only with the v4 profiler ABI, 0 on v3."},
				Column{"send_wait_ns", "I64", "ns", "Send side: time waiting for the network to complete the transfer; large across many ranks points at the fabric."},
				Column{"recv_wait_ns", "I64", "ns", "Receive side: time waiting for the peer's data to arrive. Victim signal: this rank was held up by peer."},
				Column{"recv_flush_wait_ns", "I64", "ns", "Receive side: time flushing received data into GPU memory after it arrived."},
			)...),
		},
		{
			Schema:      "nccl",
			Name:        "coll_perf",
			Description: "One row per finished NCCL collective or P2P operation on this rank, written by the NCCL profiler plugin: size, algorithm, execution time rebuilt from the op's child events, and bandwidth.",
			Synonyms:    []string{"collective performance", "NCCL timing", "allreduce time", "collective latency", "bandwidth", "busbw", "algbw", "slow collective", "comm bottleneck"},
			KeyColumns:  []string{"comm_hash", "seq", "rank", "coll_func"},
			Notes: "Only finished ops are written: a hung collective never gets a row (use nccl.inflight_ops). " +
				"Read exec_time_ns together with timing_source and distrust rows with pool_events_dropped > 0. " +
				"For bus bandwidth multiply algobw_gbps by 2(n-1)/n for AllReduce or (n-1)/n for AllGather and ReduceScatter, n = n_ranks. " +
				"Across the ranks of one (comm_hash, seq) the rank that arrived last usually has the shortest exec_time_ns, because the others' kernels were already waiting for it. " +
				"ts is in ns. " + ncclUnsignedNote,
			Storage: storageRing,
			Columns: append([]Column{
				{"ts", "I64", "ns since epoch", "When the op completed; the ring's time index."},
			}, append(ncclRankColumns(),
				colCommHash,
				Column{"n_ranks", "I32", "", "Communicator size; -1 with the v3 profiler ABI."},
				Column{"coll_func", "Str", "", "NCCL operation, e.g. 'AllReduce', 'AllGather', 'Send', 'Recv'."},
				Column{"seq", "U64", "", "NCCL's per-communicator operation count; 0 for P2P ops."},
				Column{"is_p2p", "I32", "", "1 for a P2P op (Send/Recv), 0 for a collective."},
				Column{"peer", "I32", "", "P2P peer rank within the communicator; -1 for collectives."},
				Column{"count", "U64", "count", "Number of elements."},
				Column{"msg_size_bytes", "U64", "bytes", "Message size: count times the element size."},
				Column{"dtype", "Str", "", "NCCL data type name of the elements."},
				Column{"algo", "Str", "", "NCCL algorithm, e.g. 'Ring' or 'Tree'; '' for P2P."},
				Column{"proto", "Str", "", "NCCL protocol: 'LL', 'LL128' or 'Simple'."},
				Column{"n_channels", "I32", "count", "Number of channels the op used (maximum)."},
				Column{"exec_time_ns", "I64", "ns", "Execution time rebuilt from the events named by timing_source."},
				Column{"enqueue_time_ns", "I64", "ns", "Host-side time to enqueue the op; not execution time."},
				Column{"timing_source", "Str", "", "Where exec_time_ns came from, best first: 'kernel_gpu' (GPU timer, v4), 'kernel_ch' (kernel window seen by the proxy), 'proxy' (proxy activity), 'enqueue' (fallback: host enqueue only, so exec_time_ns is not a real execution time)."},
				Column{"algobw_gbps", "F64", "GB/s", "Algorithm bandwidth: msg_size_bytes / exec_time_ns."},
				Column{"pool_events_dropped", "I32", "count", "Child events lost because a slot pool was full; above 0 means exec_time_ns may be wrong."},
			)...),
		},
		{
			Schema:      "nccl",
			Name:        "inflight_ops",
			Description: "Periodic snapshots, taken by the NCCL profiler plugin's watchdog, of NCCL operations that started but have been running longer than PROBING_NCCL_INFLIGHT_THRESHOLD_SECS (10 s); one row per such op per snapshot.",
			Synonyms:    []string{"in-flight ops", "inflight", "stuck collective", "hung NCCL op", "pending collective", "NCCL hang", "op age"},
			KeyColumns:  []string{"rank", "comm_hash", "seq", "kind"},
			Notes: "The only NCCL table that sees a hung op, since hung ops never reach nccl.proxy_ops or nccl.coll_perf. The same op reappears in each snapshot with a growing age_ns: keep the newest ts per rank. " +
				"For a stuck collective (comm_hash, seq), members with a row are waiting inside it; a member without one never launched it (CPU-side hang or a different code path) and is the likely culprit, so look at its stacks. proxy_op rows show the direction and peer being waited on. " +
				"The watchdog skips busy shards rather than block, so one missing row is not proof; a threshold of 0 disables it. Times are ns. " + ncclUnsignedNote,
			Storage: storageRing,
			Columns: []Column{
				{"ts", "I64", "ns since epoch", "Snapshot time; the ring's time index."},
				{"rank", "I32", "", "Global torch.distributed rank of the process; -1 when unknown."},
				colCommHash,
				{"coll_func", "Str", "", "NCCL operation, e.g. 'AllReduce' or 'Send'; 'unknown' when the plugin could not tell."},
				{"seq", "U64", "", "NCCL's per-communicator operation count of the stuck op."},
				{"kind", "Str", "", "'coll' for a collective, 'p2p' for a send/recv, 'proxy_op' for one proxy transfer of either."},
				{"channel_id", "I32", "", "NCCL channel (meaningful on proxy_op rows)."},
				{"peer", "I32", "", "Peer rank within the communicator that the op exchanges with; -1 when unknown or not applicable."},
				{"is_send", "I32", "", "1 for send, 0 for receive (meaningful on proxy_op rows)."},
				{"start_ns", "I64", "ns since epoch", "When the op started."},
				{"age_ns", "I64", "ns", "How long the op had been running at ts. Compare with the process group timeout: ops close to it are about to trip PyTorch's watchdog."},
			},
		},
		{
			Schema:      "nccl",
			Name:        "net_qp",
			Description: "One row per completed InfiniBand work request seen through NCCL's network plugin, with its completion time; written by the NCCL profiler plugin only when NCCL_PROFILE_EVENT_MASK includes bit 128.",
			Synonyms:    []string{"queue pair", "QP", "IB latency", "RDMA latency", "work request", "network latency", "slow link"},
			KeyColumns:  []string{"rank", "device", "qp_num"},
			Notes:       "Opt-in and high-volume, so usually empty. A device or QP whose duration_ns is far above the others points at a bad link or a congested path. ts is in ns; wr_id and length are unsigned (CAST for a Probing agent).",
			Storage:     storageRing,
			Columns: []Column{
				{"ts", "I64", "ns since epoch", "Event time; the ring's time index."},
				{"rank", "I32", "", "Global torch.distributed rank of the process; -1 when unknown."},
				{"device", "I32", "", "Index of the IB device as NCCL numbers it."},
				{"qp_num", "I32", "", "Queue pair number."},
				{"wr_id", "U64", "", "Work request id."},
				{"opcode", "I32", "", "IB verbs opcode of the request (send, RDMA write, …)."},
				{"length", "U64", "bytes", "Bytes moved by the request."},
				{"duration_ns", "I64", "ns", "Time from posting the request to its completion."},
			},
		},
		{
			Schema:      "nccl",
			Name:        "profiler_counters",
			Description: "Periodic snapshots of the NCCL profiler plugin's own counters (events seen, rows written, drops, slot-pool use), used to judge whether the other nccl.* tables are complete.",
			Synonyms:    []string{"profiler health", "NCCL plugin counters", "dropped events", "pool exhausted", "data integrity", "evidence quality"},
			KeyColumns:  []string{"rank", "ts"},
			Notes: "Read it before concluding anything from missing NCCL rows: a rising pool_exhausted, write_errors or ring_rows_overwritten means events were lost, and filtered counts ops dropped on purpose by PROBING_NCCL_MIN_MSG_BYTES. " +
				"Counters are cumulative since the plugin loaded, so compare the newest snapshot with an older one. *_live against *_cap shows how close each slot pool is to full. " +
				"The U64 counters read as null over a Probing agent's HTTP API unless CAST to BIGINT. ts is in ns.",
			Storage: storageRing,
			Columns: []Column{
				{"ts", "I64", "ns since epoch", "Snapshot time; the ring's time index."},
				{"rank", "I32", "", "Global torch.distributed rank of the process; -1 when unknown."},
				{"coll_events", "U64", "count", "Collective start events seen (cumulative)."},
				{"p2p_events", "U64", "count", "P2P start events seen (cumulative)."},
				{"proxy_op_events", "U64", "count", "Proxy-op start events seen (cumulative)."},
				{"proxy_step_events", "U64", "count", "Proxy-step start events seen (cumulative)."},
				{"kernel_ch_events", "U64", "count", "Kernel-channel start events seen (cumulative)."},
				{"net_events", "U64", "count", "Network-plugin events seen (cumulative)."},
				{"rows_written", "U64", "count", "Rows written to the nccl.* rings (cumulative)."},
				{"pool_exhausted", "U64", "count", "Times a slot pool was full and an event was dropped (cumulative); above 0 means missing NCCL rows are not evidence."},
				{"write_errors", "U64", "count", "Failed ring writes (cumulative); above 0 means rows were lost."},
				{"filtered", "U64", "count", "Events skipped on purpose because the message was smaller than PROBING_NCCL_MIN_MSG_BYTES (cumulative)."},
				{"coll_live", "I32", "count", "Collective slots in use at the snapshot."},
				{"proxy_live", "I32", "count", "Proxy-op slots in use."},
				{"step_live", "I32", "count", "Proxy-step slots in use."},
				{"kch_live", "I32", "count", "Kernel-channel slots in use."},
				{"net_live", "I32", "count", "Network-plugin slots in use."},
				{"coll_cap", "I32", "count", "Capacity of the collective slot pool (PROBING_NCCL_MAX_COLL_SLOTS)."},
				{"proxy_cap", "I32", "count", "Capacity of the proxy-op slot pool."},
				{"step_cap", "I32", "count", "Capacity of the proxy-step slot pool."},
				{"kch_cap", "I32", "count", "Capacity of the kernel-channel slot pool."},
				{"net_cap", "I32", "count", "Capacity of the network-plugin slot pool."},
				{"ring_chunks_recycled", "U64", "count", "Ring chunks recycled across all nccl.* rings of the process (cumulative)."},
				{"ring_rows_overwritten", "U64", "count", "Rows lost to ring wrap across all nccl.* rings (cumulative); above 0 means the oldest NCCL history is gone."},
			},
		},
	}
}
