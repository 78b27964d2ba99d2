package history

// SchemaVersion is the schema this binary writes: len(migrations).
const SchemaVersion = 2

// applicationID marks a SQLite file as a probing-mcp history ("PMH1" read
// as a big-endian integer). It tells our database from any other SQLite
// file someone points the server at, which user_version alone cannot.
const applicationID = 0x504D4831

// migrations turn schema version i into i+1. Each runs in one IMMEDIATE
// transaction together with the PRAGMA user_version bump (both live in the
// database file, so they commit or roll back together), which makes a
// half-applied migration impossible to observe. Append only: a released
// migration is never edited.
//
// The version lives in PRAGMA user_version rather than in a
// schema_migrations table because it is in the file header: it can be
// read before we know the file is ours (a table would have to be looked
// up first), it cannot be half-updated, and `sqlite3 history.db 'PRAGMA
// user_version'` answers for an operator.
//
// Conventions: times are unix microseconds (INTEGER); ids are
// AUTOINCREMENT so they are never reused and stay in insert order, which
// is what newest-first paging by id relies on; large BLOBs go last in
// their row so that listings that skip them never walk overflow pages.
var migrations = []string{
	// 1: the four record tables.
	`
PRAGMA application_id = 1347242033;

CREATE TABLE fr_snapshots (
	id            INTEGER PRIMARY KEY AUTOINCREMENT,
	taken_at_us   INTEGER NOT NULL,
	host          TEXT    NOT NULL DEFAULT '',
	pid           INTEGER NOT NULL DEFAULT 0,
	rank          INTEGER,
	world_size    INTEGER NOT NULL DEFAULT 0,
	source        TEXT    NOT NULL DEFAULT '',
	format        TEXT    NOT NULL DEFAULT '',
	trace_version TEXT    NOT NULL DEFAULT '',
	entries       INTEGER NOT NULL DEFAULT 0,
	size_bytes    INTEGER NOT NULL,
	sha256        TEXT    NOT NULL,
	note          TEXT    NOT NULL DEFAULT '',
	data          BLOB    NOT NULL
);
CREATE INDEX fr_snapshots_taken_at ON fr_snapshots(taken_at_us);
CREATE INDEX fr_snapshots_rank     ON fr_snapshots(rank, id);
CREATE INDEX fr_snapshots_process  ON fr_snapshots(host, pid, id);
CREATE INDEX fr_snapshots_sha256   ON fr_snapshots(sha256);

CREATE TABLE stack_captures (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	taken_at_us  INTEGER NOT NULL,
	host         TEXT    NOT NULL DEFAULT '',
	pid          INTEGER NOT NULL DEFAULT 0,
	rank         INTEGER,
	method       TEXT    NOT NULL,
	thread_count INTEGER NOT NULL DEFAULT 0,
	stacks_json  TEXT
);
CREATE INDEX stack_captures_taken_at ON stack_captures(taken_at_us);
CREATE INDEX stack_captures_rank     ON stack_captures(rank, id);
CREATE INDEX stack_captures_process  ON stack_captures(host, pid, id);

CREATE TABLE diagnoses (
	id            INTEGER PRIMARY KEY AUTOINCREMENT,
	created_at_us INTEGER NOT NULL,
	kind          TEXT    NOT NULL,
	inputs_json   TEXT,
	verdict       TEXT    NOT NULL DEFAULT '',
	culprit_ranks TEXT    NOT NULL DEFAULT '',
	report_json   TEXT
);
CREATE INDEX diagnoses_created_at ON diagnoses(created_at_us);
CREATE INDEX diagnoses_kind       ON diagnoses(kind, id);

CREATE TABLE audit (
	id        INTEGER PRIMARY KEY AUTOINCREMENT,
	ts_us     INTEGER NOT NULL,
	tool      TEXT    NOT NULL,
	phase     TEXT    NOT NULL,
	caller    TEXT    NOT NULL DEFAULT '',
	args_json TEXT,
	outcome   TEXT    NOT NULL DEFAULT '',
	error     TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX audit_ts   ON audit(ts_us);
CREATE INDEX audit_tool ON audit(tool, id);
`,
	// 2: the watcher's events (probing-mcp watch), each alert as sent.
	`
CREATE TABLE alerts (
	id            INTEGER PRIMARY KEY AUTOINCREMENT,
	at_us         INTEGER NOT NULL,
	kind          TEXT    NOT NULL,
	level         TEXT    NOT NULL,
	title         TEXT    NOT NULL,
	text          TEXT    NOT NULL DEFAULT '',
	job           TEXT    NOT NULL DEFAULT '',
	host          TEXT    NOT NULL DEFAULT '',
	incident      INTEGER NOT NULL DEFAULT 0,
	state         TEXT    NOT NULL DEFAULT '',
	category      TEXT    NOT NULL DEFAULT '',
	culprit_ranks TEXT    NOT NULL DEFAULT '',
	location      TEXT    NOT NULL DEFAULT '',
	confidence    TEXT    NOT NULL DEFAULT '',
	diagnosis_id  INTEGER,
	delivery      TEXT    NOT NULL DEFAULT '',
	headline_json TEXT
);
CREATE INDEX alerts_at   ON alerts(at_us);
CREATE INDEX alerts_kind ON alerts(kind, id);
`,
}
