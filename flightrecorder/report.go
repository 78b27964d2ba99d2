package flightrecorder

// Verdicts, in fr_trace's vocabulary, for one process group.
const (
	VerdictOK           = "OK"
	VerdictMissingRanks = "MISSING_RANKS"
	// The MatchState names are verdicts too: COLLECTIVE_TYPE_MISMATCH,
	// SIZE_OR_SYNTAX_MISMATCH, COLLECTIVE_STATE_MISMATCH,
	// COLLECTIVE_DTYPE_MISMATCH and UNDECIDED.
)

// Finding kinds: what the verdict means, in words an on-call engineer uses.
const (
	KindMissingRank    = "MISSING_RANK"            // a rank never joined a collective its peers wait in
	KindTypeDivergence = "TYPE_DIVERGENCE"         // ranks called different collectives (code-path divergence)
	KindShapeMismatch  = "SHAPE_MISMATCH"          // same collective, different tensor sizes
	KindDtypeMismatch  = "DTYPE_MISMATCH"          // same collective, different dtypes
	KindStateMismatch  = "STATE_MISMATCH"          // same collective, some ranks finished and others not
	KindAllToAllSplit  = "ALLTOALL_SPLIT_MISMATCH" // all_to_all totals do not add up
	KindP2PUnmatched   = "P2P_UNMATCHED"           // a send or recv whose peer never posted the other side
	KindP2PMismatch    = "P2P_MISMATCH"            // a send/recv pair that disagrees on sizes
	KindStuck          = "STUCK_IN_COLLECTIVE"     // every rank entered the same collective, none finished
	KindTimedOut       = "TIMED_OUT"               // retired by the watchdog without completing
	KindInsufficient   = "INSUFFICIENT_DATA"       // missing dumps keep the verdict open
	KindUnknownOp      = "UNKNOWN_OP"              // op names fr_trace does not know
	KindHealthy        = "OK"
	confidenceHigh     = "high"
	confidenceMedium   = "medium"
	confidenceLow      = "low"
	defaultMaxLagRows  = 8
)

// Report is the whole analysis: one verdict per process group, the
// evidence, what fr_trace would have said, and what could not be read.
type Report struct {
	// Summary is a few sentences for a human or an LLM: the verdict first.
	Summary string `json:"summary"`
	// NoMatch, when set, says that the group or rank filter matched no
	// process group of the dumps, and which ones exist: an empty answer
	// there is the caller's mistake, never an all clear.
	NoMatch string `json:"no_match,omitempty"`
	// Verdict is the most severe process-group verdict.
	Verdict string `json:"verdict"`
	// Truncated says that the rendered report (Bounded) was cut to its
	// bounds; Omitted says what was cut.
	Truncated     bool        `json:"truncated"`
	Omitted       []string    `json:"omitted,omitempty"`
	Ranks         RankSummary `json:"ranks"`
	ProcessGroups []PGReport  `json:"process_groups"`
	// Across reads the waits through every group (across.go): a group's
	// culprit may be waiting in another group. Nil when no rank waits or
	// the analysis was filtered.
	Across      *Across     `json:"across_groups,omitempty"`
	FRTrace     FRTraceView `json:"fr_trace"`
	DataQuality DataQuality `json:"data_quality"`
	// Created is, per dumped rank, when its last entries were created
	// (Unix ns, oldest first, at most createdKept): a clock of the
	// collectives no Python wrapper sees (DDP's, FSDP's), for the
	// diagnosis' progress. Not in the JSON: the dumps are its source.
	Created map[int][]int64 `json:"-"`
	// Recent is, per dumped rank, its last few ops (picture.go), nil past
	// recentMaxRanks dumps. Not in the JSON either.
	Recent map[int][]RecentOp `json:"-"`
}

// createdKept bounds Report.Created per rank.
const createdKept = 64

// RankSummary says which ranks the analysis saw.
type RankSummary struct {
	Dumped      []int  `json:"dumped"`
	DumpedText  string `json:"dumped_ranges"`
	Expected    int    `json:"expected_world_size"` // ranks named by any process group
	MissingDump []int  `json:"missing_dumps"`
	MissingText string `json:"missing_dumps_ranges,omitempty"` // MissingDump as ranges, bounded
	Versions    string `json:"versions"`                       // e.g. "2.10" or "2.8 (ranks 0-3), 2.10 (ranks 4-7)"
	Formats     string `json:"formats"`                        // pickle, json, or both
	TimingOn    bool   `json:"timing_enabled"`
	// ReferenceTimeNs is "now" for ages: the latest time recorded in any
	// dump (the analysis is post-mortem, the wall clock says nothing).
	ReferenceTimeNs int64 `json:"reference_time_ns"`
}

// PGReport is the verdict on one process group.
type PGReport struct {
	PGName          string `json:"pg_name"`
	PGDesc          string `json:"pg_desc"`
	Members         []int  `json:"-"`
	MembersText     string `json:"ranks"`
	Size            int    `json:"size"`
	Verdict         string `json:"verdict"`
	CollectiveSeqID int64  `json:"collective_seq_id"` // where the verdict was found (last matched seq when OK)
	ProfilingName   string `json:"profiling_name"`
	RecordID        int64  `json:"record_id"`
	MissingRanks    []int  `json:"missing_ranks"`
	CulpritRanks    []int  `json:"culprit_ranks"`
	// LaggingRanks rank the members by how far behind they are, worst
	// first, from pg_status when the dumps have it and entries otherwise.
	LaggingRanks []Lag `json:"lagging_ranks"`
	LagTruncated bool  `json:"lagging_ranks_truncated,omitempty"`
	MissingDumps []int `json:"missing_dumps"`
	// MissingDumpsText is MissingDumps as ranges, bounded.
	MissingDumpsText string    `json:"missing_dumps_ranges,omitempty"`
	Finding          Finding   `json:"finding"`
	Secondary        []Finding `json:"other_findings,omitempty"`
	Window           Window    `json:"window"`
	Matched          int       `json:"matched_collectives"`
	// CulpritFrames is the stack of the culprit's entry (innermost first),
	// PeerFrames that of the ranks it disagrees with, when dumps hold stacks.
	CulpritFrames []Frame `json:"culprit_frames,omitempty"`
	// CulpritFramesAt says which of the culprit's entries recorded
	// CulpritFrames: a stack from then, never the rank's stack now.
	CulpritFramesAt *FramesAt    `json:"culprit_frames_at,omitempty"`
	PeerFrames      []Frame      `json:"peer_frames,omitempty"`
	FRTrace         *FRTraceNote `json:"fr_trace,omitempty"`
	// Arrival names the member that enters the recent collectives last,
	// when one does in most of them (arrivals.go).
	Arrival       *Arrival `json:"arrival,omitempty"`
	severity      int
	oldestPending int64 // creation time of the oldest pending op, 0 if none
	guid          string
}

// FramesAt is the entry a recorded stack belongs to: the rank, its
// collective, and how long before the last recorded event it was created.
type FramesAt struct {
	Rank  int    `json:"rank"`
	Seq   int64  `json:"collective_seq_id"`
	Op    string `json:"profiling_name,omitempty"`
	AgeNs int64  `json:"age_ns"`
	// Last: the rank's last recorded collective (it never reached the
	// one its peers wait in), not the collective of the verdict.
	Last bool `json:"last_recorded"`
}

// Window is the range of collective sequence numbers every member's ring
// still covered, over which ranks were compared.
type Window struct {
	First int64 `json:"first_seq"`
	Last  int64 `json:"last_seq"`
}

// Lag is one rank's progress in a process group.
type Lag struct {
	Rank          int    `json:"rank"`
	LastEnqueued  int64  `json:"last_enqueued"`
	LastStarted   int64  `json:"last_started"`
	LastCompleted int64  `json:"last_completed"`
	Behind        int64  `json:"behind"`      // completed collectives behind the most advanced member
	EnqueueLag    int64  `json:"enqueue_lag"` // enqueued collectives behind the most advanced member
	Source        string `json:"source"`      // pg_status or entries
	// Pending is the oldest op the rank enqueued and did not complete.
	Pending *PendingOp `json:"pending,omitempty"`
	Note    string     `json:"note,omitempty"`
}

// PendingOp is an op enqueued but not completed.
type PendingOp struct {
	Seq           int64   `json:"collective_seq_id"`
	ProfilingName string  `json:"profiling_name"`
	State         string  `json:"state"`
	AgeSeconds    float64 `json:"age_s"` // before the reference time
	TimeoutMs     int64   `json:"timeout_ms,omitempty"`
	TimedOut      bool    `json:"timed_out,omitempty"`
}

// Finding is the verdict explained: a kind, one line of evidence for a
// human, and the structured facts behind it.
type Finding struct {
	Kind              string   `json:"kind"`
	Line              string   `json:"line"`
	Seq               int64    `json:"collective_seq_id"`
	Ranks             []int    `json:"ranks,omitempty"` // the ranks the finding is about
	MajoritySignature string   `json:"majority_signature,omitempty"`
	Minority          []int    `json:"minority,omitempty"`
	Evidence          []string `json:"evidence,omitempty"`
	Confidence        string   `json:"confidence"`
}

// FRTraceNote is fr_trace's first problem for the group and whether we agree.
type FRTraceNote struct {
	Verdict      string `json:"verdict"`
	Header       string `json:"header,omitempty"`
	MissingRanks []int  `json:"missing_ranks,omitempty"`
	CulpritRanks []int  `json:"culprit_ranks,omitempty"`
	// Seq is the collective of fr_trace's first problem block (0: none).
	Seq    int64  `json:"collective_seq_id,omitempty"`
	Agrees bool   `json:"agrees"`
	Why    string `json:"why_different,omitempty"`
}

// FRTraceView is what torch's fr_trace would print for these dumps.
type FRTraceView struct {
	Aborted             string `json:"aborted,omitempty"`
	AbortedIncomplete   string `json:"aborted_allow_incomplete,omitempty"`
	UsedAllowIncomplete bool   `json:"used_allow_incomplete_ranks"`
	// Skipped says why fr_trace's replay was not run (too many members
	// without a dump to walk); the groups then carry no fr_trace note.
	Skipped    string   `json:"not_replayed,omitempty"`
	Blocks     []Block  `json:"first_blocks"` // the first problem block per group, in log order
	Transcript []string `json:"transcript,omitempty"`
}

// DataQuality lists everything that limits the analysis.
type DataQuality struct {
	Partial  bool          `json:"partial"`
	Files    []FileProblem `json:"file_problems,omitempty"`
	Ignored  int           `json:"ignored_files,omitempty"`
	Warnings []string      `json:"warnings,omitempty"`
}
