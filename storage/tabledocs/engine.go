package tabledocs

// The engine's own metadata tables (probing.*) and the server's SQLite
// history (history.*). Types are SQLite's: TEXT, INTEGER, REAL, BLOB.

func engineTables() []Table {
	return []Table{
		{
			Schema:      "probing",
			Name:        "table_docs",
			Description: "One row per documented table of this engine, generated from the built-in documentation catalog: what the table holds, what people call it and how to read it.",
			Synonyms:    []string{"table docs", "table descriptions", "catalog", "what tables exist", "schema docs", "data dictionary"},
			KeyColumns:  []string{"table_schema", "table_name"},
			Notes: "Probing's probe.probing.table_docs columns, then three this engine adds (storage, key_columns, processes). Search description and synonyms with LIKE to find the table for a question, then read probing.column_docs for its columns. " +
				"A ring table with processes = 0 has no ring file in the data dir right now (its collector is off or its plugin not loaded), so an empty result from it is not evidence about the job.",
			Storage: storageEngine,
			Columns: []Column{
				{"table_schema", "TEXT", "", "Schema of the table, e.g. 'python' or 'nccl'."},
				{"table_name", "TEXT", "", "Table name within the schema."},
				{"description", "TEXT", "", "What one row is, who writes it and when."},
				{"synonyms", "TEXT", "", "Comma-separated words people use for what the table holds."},
				{"notes", "TEXT", "", "Caveats that change how to read the table (units, sentinels, missing data); '' when none."},
				{"global_name", "TEXT", "", "Name of the table's cross-rank view in Probing (global.<schema>.<table>); '' when it has none."},
				{"storage", "TEXT", "", "Where rows live: 'ring' (MEMT files in the data dir, readable here), 'virtual' (computed inside a live process; not readable from files), 'history' (this server's SQLite history) or 'engine' (metadata of this engine)."},
				{"key_columns", "TEXT", "", "Comma-separated columns to group or join by."},
				{"processes", "INTEGER", "count", "Number of processes whose data dir holds a ring file for the table now; 0 for tables that are not rings or have no file."},
			},
		},
		{
			Schema:      "probing",
			Name:        "column_docs",
			Description: "One row per column of every documented table (and of any other ring found in the data dir), in the table's column order, generated from the built-in documentation catalog and the ring files present.",
			Synonyms:    []string{"column docs", "column descriptions", "describe table", "columns", "data types", "units"},
			KeyColumns:  []string{"table_schema", "table_name", "column_name"},
			Notes: "Unlike Probing's column_docs, which has no type, this one carries data_type: the MEMT dtype (U8 I32 I64 F32 F64 U64 U32 Str Bytes) for ring and virtual tables, taken from the ring files when they exist, and the SQLite type for history and engine tables. It also adds unit and ordinal. " +
				"Ring tables end with the tag columns the engine appends (_host, _addr, _rank, _node_rank, _local_rank, _role, _pid).",
			Storage: storageEngine,
			Columns: []Column{
				{"table_schema", "TEXT", "", "Schema of the table."},
				{"table_name", "TEXT", "", "Table the column belongs to."},
				{"column_name", "TEXT", "", "Column name."},
				{"data_type", "TEXT", "", "Stored type: a MEMT dtype name for ring and virtual tables, TEXT/INTEGER/REAL/BLOB for history and engine tables."},
				{"unit", "TEXT", "", "Unit of the values, e.g. 'ns', 'µs since epoch', 'bytes', 'MB', '%'; '' when none."},
				{"description", "TEXT", "", "Meaning of the column and of sentinel values such as -1 or ''."},
				{"ordinal", "INTEGER", "", "1-based position of the column in the table."},
			},
		},
		{
			Schema:      "probing",
			Name:        "rings",
			Description: "One row per MEMT ring file the engine discovered in the data dir (<data_dir>/<pid>/<schema>.<table>), with its geometry, whether its writer is still running, and its loss counters.",
			Synonyms:    []string{"ring files", "memtables", "data dir", "which processes", "probed processes", "dead writer", "ring health", "overwritten rows"},
			KeyColumns:  []string{"schema_name", "table_name", "pid"},
			Notes: "Start here to see which processes wrote which tables: a table missing for a pid means that collector never ran in that process. " +
				"writer_alive = 0 means the process died (or its pid now belongs to another process); its rings stay readable for post-mortems until cleaned up. " +
				"rows_overwritten > 0 means the ring wrapped and its oldest rows are gone, so the absence of early rows is not evidence; writes_blocked > 0 means rows may have been dropped while readers pinned a chunk.",
			Storage: storageEngine,
			Columns: []Column{
				{"schema_name", "TEXT", "", "Schema part of the file name (before the first dot), e.g. 'python'; 'memtable' for a file name without a dot."},
				{"table_name", "TEXT", "", "Table part of the file name, e.g. 'torch_trace'."},
				{"pid", "INTEGER", "", "Process id taken from the directory <data_dir>/<pid>."},
				{"path", "TEXT", "", "Path of the ring file."},
				{"writer_alive", "INTEGER", "", "1 while the creating process runs (its pid exists and its start time matches the one recorded in the file), else 0."},
				{"columns", "INTEGER", "count", "Number of columns the ring stores (without the tag columns the engine appends)."},
				{"chunks", "INTEGER", "count", "Number of chunks in the ring."},
				{"chunk_size", "INTEGER", "bytes", "Size of one chunk."},
				{"bytes", "INTEGER", "bytes", "Size of the file."},
				{"dedup", "INTEGER", "", "1 when the ring may store repeated strings as back-references (dedup flag), else 0; Probing's own writers leave it 0."},
				{"chunks_recycled", "INTEGER", "count", "Chunks that held rows and were reused after the ring wrapped (cumulative)."},
				{"rows_overwritten", "INTEGER", "count", "Rows lost to ring wrap so far; above 0 means the oldest rows are gone."},
				{"writes_blocked", "INTEGER", "count", "Times the writer could not recycle a chunk because a reader held it; each may have cost a row."},
			},
		},
	}
}

func historyTables() []Table {
	return []Table{
		{
			Schema:      "history",
			Name:        "fr_snapshots",
			Description: "One row per Flight Recorder dump this server stored, whether loaded from a dump file or fetched live from a rank's agent, kept so later analyses can reuse and compare it.",
			Synonyms:    []string{"stored FR dumps", "saved flight recorder snapshots", "FR history", "past snapshots", "dump files"},
			KeyColumns:  []string{"id", "rank", "taken_at_us"},
			Notes: "data holds the whole raw dump: leave it out of queries unless needed. Snapshots of different ranks taken at different times do not show one moment of the job, so compare taken_at_us before analysing them together. " +
				"Rows with the same sha256 hold the same dump.",
			Storage: storageHistory,
			Columns: []Column{
				{"id", "INTEGER", "", "Row id; other tables and reports refer to a snapshot by it."},
				{"taken_at_us", "INTEGER", "µs since epoch", "When the snapshot was taken or the dump stored."},
				{"host", "TEXT", "", "Host the rank ran on; '' when unknown."},
				{"pid", "INTEGER", "", "Process id of the rank; 0 when unknown."},
				{"rank", "INTEGER", "", "Global rank the dump belongs to; NULL when unknown."},
				{"world_size", "INTEGER", "", "World size recorded with the dump; 0 when unknown."},
				{"source", "TEXT", "", "Where the dump came from, e.g. a file path or a live agent snapshot."},
				{"format", "TEXT", "", "Encoding of data: 'pickle' or 'json', PyTorch's two dump formats."},
				{"trace_version", "TEXT", "", "Flight Recorder format version written in the dump, e.g. '2.10'."},
				{"entries", "INTEGER", "count", "Number of recorder entries in the dump."},
				{"size_bytes", "INTEGER", "bytes", "Size of data."},
				{"sha256", "TEXT", "", "Hex SHA-256 of data; equal digests mean identical dumps."},
				{"note", "TEXT", "", "Free-text note, e.g. why it was taken; '' when none."},
				{"data", "BLOB", "bytes", "The raw dump as received; last in the row so listings that skip it stay cheap."},
			},
		},
		{
			Schema:      "history",
			Name:        "stack_captures",
			Description: "One row per capture of a process's thread stacks made by this server, kept to compare captures over time and across ranks.",
			Synonyms:    []string{"stack history", "saved stacks", "stack dumps", "thread dumps", "past backtraces"},
			KeyColumns:  []string{"id", "rank", "taken_at_us"},
			Notes:       "Two captures of one rank with identical stacks some seconds apart show a thread that is not moving. stacks_json can be large; select it only for the captures needed.",
			Storage:     storageHistory,
			Columns: []Column{
				{"id", "INTEGER", "", "Row id."},
				{"taken_at_us", "INTEGER", "µs since epoch", "When the stacks were captured."},
				{"host", "TEXT", "", "Host of the process; '' when unknown."},
				{"pid", "INTEGER", "", "Process id whose stacks were captured; 0 when unknown."},
				{"rank", "INTEGER", "", "Global rank of the process; NULL when unknown."},
				{"method", "TEXT", "", "How the stacks were obtained: 'agent' (asked the in-process agent), 'faulthandler' (a dump file Python wrote without needing the GIL) or 'proc' (read from outside through /proc)."},
				{"thread_count", "INTEGER", "count", "Number of threads captured."},
				{"stacks_json", "TEXT", "", "JSON of the captured threads and their frames; NULL when none were stored."},
			},
		},
		{
			Schema:      "history",
			Name:        "diagnoses",
			Description: "One row per diagnosis this server produced (for example a Flight Recorder analysis or a hang diagnosis), with what it was given, its verdict, the ranks it blamed and the full report.",
			Synonyms:    []string{"past diagnoses", "verdicts", "previous analyses", "reports", "culprits"},
			KeyColumns:  []string{"id", "kind", "created_at_us"},
			Notes:       "Read verdict and culprit_ranks first; report_json holds the whole report and can be large.",
			Storage:     storageHistory,
			Columns: []Column{
				{"id", "INTEGER", "", "Row id."},
				{"created_at_us", "INTEGER", "µs since epoch", "When the diagnosis was produced."},
				{"kind", "TEXT", "", "Which analysis produced it, e.g. 'flight_recorder'."},
				{"inputs_json", "TEXT", "", "JSON of the inputs (files, snapshot ids, parameters); NULL when none."},
				{"verdict", "TEXT", "", "One-line conclusion."},
				{"culprit_ranks", "TEXT", "", "Ranks blamed, as rank ranges such as '0-3,7'; '' when none."},
				{"report_json", "TEXT", "", "The full report as JSON; NULL when none was stored."},
			},
		},
		{
			Schema:      "history",
			Name:        "audit",
			Description: "One row per half of an audited tool call made through this server (the call before it runs, then its result), above all the write tools that change a training process (set_config, eval_python).",
			Synonyms:    []string{"audit log", "who changed", "write tools", "config changes", "eval history", "tool calls"},
			KeyColumns:  []string{"ts_us", "tool", "caller"},
			Notes:       "Use it to see who changed a process's configuration or ran code in it, and when. A 'call' row without a later 'result' row for the same tool and caller means the call never finished (or the server died).",
			Storage:     storageHistory,
			Columns: []Column{
				{"id", "INTEGER", "", "Row id."},
				{"ts_us", "INTEGER", "µs since epoch", "When the step was recorded."},
				{"tool", "TEXT", "", "Name of the tool called."},
				{"phase", "TEXT", "", "'call' for the row written before the tool runs, 'result' for the row written after it."},
				{"caller", "TEXT", "", "Who made the call: the MCP client or authenticated HTTP principal."},
				{"args_json", "TEXT", "", "JSON of what was recorded about the arguments (possibly a digest rather than the values); NULL when none."},
				{"outcome", "TEXT", "", "On 'result' rows: 'ok', 'error' (the tool returned an error result) or 'fault' (the call itself failed); '' on 'call' rows."},
				{"error", "TEXT", "", "Error message; '' when none."},
			},
		},
	}
}
