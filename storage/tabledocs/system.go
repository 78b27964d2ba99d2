package tabledocs

// Host and device sampling: cpu.* and gpu.* rings written by the agent's
// native samplers, and the virtual process.kmsg and rdma.mlx_hca tables.

func systemTables() []Table {
	return []Table{
		{
			Schema:      "cpu",
			Name:        "utilization",
			Description: "CPU and memory samples of the training process, written by the agent's CPU sampler every PROBING_CPU_SAMPLE_MS (1000 ms): per tick one 'process' row for the whole process plus one 'thread' row for each of the busiest threads.",
			Synonyms:    []string{"CPU usage", "CPU utilization", "CPU percent", "RSS", "resident memory", "thread CPU", "context switches", "busy threads"},
			KeyColumns:  []string{"scope", "tid", "ts"},
			Notes: "Filter on scope first: process-only columns (rss_kb, thread_count, delta_*_ctxt) are 0 on thread rows, and state/wchan are '' on the process row. " +
				"A hung rank whose process sits near 0% CPU is blocked (a lock, I/O, or waiting for a peer); a thread pinned near 100% is spinning. " +
				"The first row for a newly seen thread is measured against zero, so its deltas are inflated. The ring is 8 × 4 KiB and keeps only the last few tens of seconds.",
			Storage: storageRing,
			Columns: []Column{
				{"ts", "I64", "µs since epoch", "Sample time; the ring's time index."},
				{"scope", "Str", "", "'process' for the whole-process row, 'thread' for a per-thread row."},
				{"platform", "Str", "", "Operating system the sampler ran on, e.g. 'linux'."},
				{"tid", "I32", "", "Thread id; 0 on the process row."},
				{"comm", "Str", "", "Thread name as the OS knows it (e.g. 'pt_main_thread', 'python'); '' on the process row."},
				{"wall_ns", "I64", "ns", "Wall time since the previous sample: the interval the delta columns cover."},
				{"delta_user_ns", "I64", "ns", "User-mode CPU time used during the interval."},
				{"delta_sys_ns", "I64", "ns", "Kernel-mode CPU time used during the interval."},
				{"delta_total_ns", "I64", "ns", "User plus kernel CPU time used during the interval."},
				{"cpu_user_pct", "F32", "%", "delta_user_ns as a share of wall_ns; on the process row it can exceed 100 (several cores)."},
				{"cpu_sys_pct", "F32", "%", "delta_sys_ns as a share of wall_ns."},
				{"cpu_total_pct", "F32", "%", "Total CPU share of the interval; above 100 means more than one core busy."},
				{"cum_user_ns", "I64", "ns", "User CPU time accumulated since the process or thread started."},
				{"cum_sys_ns", "I64", "ns", "Kernel CPU time accumulated since the process or thread started."},
				{"rss_kb", "I64", "KiB", "Resident memory of the process; 0 on thread rows. Steady growth hints at a host-memory leak heading for the OOM killer."},
				{"thread_count", "I32", "", "Number of threads in the process; 0 on thread rows."},
				{"delta_vol_ctxt", "I64", "count", "Voluntary context switches (the process blocked) during the interval; 0 on thread rows."},
				{"delta_invol_ctxt", "I64", "count", "Involuntary context switches (preemptions) during the interval; high values mean CPU contention, e.g. too many dataloader workers. 0 on thread rows."},
				{"state", "Str", "", "Scheduler state of the thread: 'R' running, 'S' sleeping, 'D' uninterruptible (usually I/O or a driver call), 'T' stopped, 'Z' zombie; '' on the process row."},
				{"wchan", "Str", "", "Kernel function the thread is blocked in, e.g. 'futex_wait_queue' or 'ep_poll'; '' when running, unavailable, or on the process row."},
			},
		},
		{
			Schema:      "cpu",
			Name:        "tasks",
			Description: "One row per sampled thread per CPU-sampler tick, with its scheduler state and kernel wait channel; the same threads as the thread rows of cpu.utilization.",
			Synonyms:    []string{"threads", "thread states", "wait channel", "wchan", "blocked threads", "D state", "futex"},
			KeyColumns:  []string{"tid", "ts"},
			Notes: "Take the newest ts and count threads by state and wchan: many threads sleeping in futex waits with the main thread idle suggests a lock or a wait on a peer; 'D' means a thread is stuck in the kernel (file system, driver). " +
				"Only the busiest threads (PROBING_CPU_THREAD_TOP_N, default 8) are sampled, so an idle blocked thread may be missing; the ring keeps only the last few tens of seconds.",
			Storage: storageRing,
			Columns: []Column{
				{"ts", "I64", "µs since epoch", "Sample time; the ring's time index."},
				{"platform", "Str", "", "Operating system the sampler ran on, e.g. 'linux'."},
				{"tid", "I32", "", "Thread id."},
				{"comm", "Str", "", "Thread name as the OS knows it."},
				{"state", "Str", "", "Scheduler state: 'R', 'S', 'D', 'T' or 'Z' (see cpu.utilization.state); '' when unavailable."},
				{"wchan", "Str", "", "Kernel function the thread is blocked in; '' when running or unavailable."},
				{"wall_ns", "I64", "ns", "Wall time since the previous sample."},
				{"delta_user_ns", "I64", "ns", "User-mode CPU time of the thread during the interval."},
				{"delta_sys_ns", "I64", "ns", "Kernel-mode CPU time of the thread during the interval."},
				{"delta_total_ns", "I64", "ns", "User plus kernel CPU time during the interval; 0 for a thread that did not run at all."},
			},
		},
		{
			Schema:      "gpu",
			Name:        "utilization",
			Description: "One row per visible GPU (or NPU) per tick of the agent's GPU sampler, every PROBING_GPU_SAMPLE_MS (1000 ms) when a backend is detected: memory in use and how busy the device is.",
			Synonyms:    []string{"GPU usage", "GPU utilization", "GPU memory", "device memory", "VRAM", "HBM", "NPU", "temperature", "power", "SM busy"},
			KeyColumns:  []string{"device_id", "ts"},
			Notes: "Every process samples all devices it can see, so on a node with one rank per GPU the same device can appear in several ranks' rings; filter on the rank's own device (usually device_id = _local_rank) or de-duplicate by (_host, device_id). " +
				"NCCL kernels spin while waiting for peers, so in a hang the ranks stuck inside a collective show high gpu_util_pct while a rank that never launched it (stuck on the CPU side) drops to about 0. " +
				"Optional metrics are -1 when the backend does not report them. The ring is 8 × 4 KiB, so only recent samples remain.",
			Storage: storageRing,
			Columns: []Column{
				{"ts", "I64", "µs since epoch", "Sample time; the ring's time index."},
				{"backend", "Str", "", "Backend that produced the sample, e.g. 'cuda', 'rocm', 'npu' or 'metal'."},
				{"device_id", "I32", "", "Device ordinal as the backend enumerates the devices visible to this process."},
				{"name", "Str", "", "Device model name, e.g. 'NVIDIA H100 80GB HBM3'."},
				{"memory_model", "Str", "", "How device memory is organised (discrete device memory or memory shared with the host)."},
				{"chip", "Str", "", "Chip identifier when the backend reports one; '' otherwise."},
				{"free_bytes", "I64", "bytes", "Free device memory."},
				{"total_bytes", "I64", "bytes", "Total device memory."},
				{"used_bytes", "I64", "bytes", "Device memory in use by all processes (total minus free), not only this one."},
				{"mem_used_pct", "F32", "%", "used_bytes as a share of total_bytes. Near 100 on one rank suggests fragmentation or an OOM about to happen."},
				{"gpu_util_pct", "F32", "%", "Share of the last sample period in which a kernel was running; -1 when unavailable. High during a hang means kernels (often NCCL) are spinning; about 0 means nothing was launched."},
				{"mem_controller_util_pct", "F32", "%", "Share of time the memory controller was busy; -1 when unavailable."},
				{"renderer_util_pct", "F32", "%", "Renderer utilization reported by Apple GPUs; -1 elsewhere."},
				{"tiler_util_pct", "F32", "%", "Tiler utilization reported by Apple GPUs; -1 elsewhere."},
				{"driver_mem_bytes", "I64", "bytes", "Memory the driver reports as allocated, where the backend provides it; 0 when unknown."},
				{"wall_ns", "I64", "ns", "Time the sampler spent reading the devices this tick (not the sampling interval); a large value means the driver is slow to answer."},
				{"vector_util_pct", "F32", "%", "Vector-unit utilization (Ascend NPUs); -1 when unavailable."},
				{"mem_bandwidth_util_pct", "F32", "%", "Memory-bandwidth utilization; -1 when unavailable."},
				{"temperature_c", "F32", "°C", "Device temperature; -1 when unavailable. A hot, throttling device can make its rank a straggler."},
				{"power_w", "F32", "W", "Power draw; -1 when unavailable. Low power on one rank while the others are high marks the idle (waiting or stuck) one."},
			},
		},
		{
			Schema:      "process",
			Name:        "kmsg",
			Description: "The kernel log ring buffer (what dmesg shows), read by the agent at query time; one row per kernel message.",
			Synonyms:    []string{"dmesg", "kernel log", "kernel messages", "Xid", "NVRM", "OOM killer", "oom-kill", "hardware errors", "syslog"},
			KeyColumns:  []string{"timestamp"},
			Notes: "Virtual and Linux only: there is no ring file to read here. The log is node-wide, so every rank on a node returns the same rows, and reading it may need privileges (kernel.dmesg_restrict). " +
				"Search message for 'Xid' or 'NVRM' (GPU faults, fallen-off-the-bus), 'Out of memory' or 'oom-kill' (host OOM), 'mlx5' or 'link' (NIC and link flaps), 'segfault'.",
			Storage: storageVirtual,
			Columns: []Column{
				{"timestamp", "I64", "µs since boot", "When the kernel logged the message. Probing counts it from system boot as dmesg does, not from the epoch, so compare it with uptime rather than wall-clock times."},
				{"facility", "Str", "", "Syslog facility of the message, e.g. 'kern'."},
				{"level", "Str", "", "Severity, e.g. 'err', 'warn', 'info'."},
				{"message", "Str", "", "Message text."},
			},
		},
		{
			Schema:      "rdma",
			Name:        "mlx_hca",
			Description: "Counters of one Mellanox/NVIDIA RDMA adapter (HCA) port, read from sysfs by the agent at query time; one row per query.",
			Synonyms:    []string{"RDMA", "InfiniBand", "IB", "RoCE", "HCA", "NIC counters", "ECN", "CNP", "congestion", "link down", "network"},
			KeyColumns:  []string{"hca_name"},
			Notes: "Virtual: computed in the live process, no ring file to read here. Covers port 1 of the adapter named by the rdma.hca_name setting; the query sleeps rdma.sample_rate seconds to measure the packet rates. " +
				"The counters are cumulative since the driver loaded, so compare two queries; an unreadable counter reads 0 and values are floating point. " +
				"Only the columns named in the contract are listed; the live table also carries raw port packet and data counters.",
			Storage: storageVirtual,
			Columns: []Column{
				{"hca_name", "Str", "", "Adapter the row describes, e.g. 'mlx5_0'."},
				{"rcv_pkts_rate", "F64", "packets/s", "Receive packet rate on the port over the sampling window; near 0 on a node whose peers are still sending suggests a dead path."},
				{"snd_pkts_rate", "F64", "packets/s", "Transmit packet rate on the port over the sampling window."},
				{"link_downed", "F64", "count", "Times the port's link went down (cumulative). Any increase during the job is a link or cabling event that can stall NCCL."},
				{"np_cnp_sent", "F64", "count", "Congestion notification packets this adapter sent as a RoCE receiver (cumulative); a rising count means traffic towards this node is congested."},
				{"np_ecn_marked_roce_packets", "F64", "count", "RoCE packets that arrived ECN-marked by switches (cumulative); rising means congestion on the path into this node."},
			},
		},
	}
}
