package history

import (
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Snapshot is one Flight Recorder dump as it was read, from a live
// process or a file.
type Snapshot struct {
	ID           int64
	TakenAt      time.Time // zero: the time of AddSnapshot
	Host         string
	PID          int
	Rank         *int // nil when the rank is unknown
	WorldSize    int  // 0 when unknown
	Source       string
	Format       string // "pickle" or "json"
	TraceVersion string
	Entries      int
	SizeBytes    int64  // set by AddSnapshot: len(Data)
	SHA256       string // set by AddSnapshot: hex SHA-256 of Data
	Note         string
	// Data is the raw dump. AddSnapshot stores it; listings leave it nil
	// (SnapshotData fetches it) so that paging through history never
	// loads megabytes per row.
	Data []byte
}

// StackCapture is the Python stacks of one process at one moment.
type StackCapture struct {
	ID          int64
	TakenAt     time.Time // zero: the time of AddStackCapture
	Host        string
	PID         int
	Rank        *int   // nil when the rank is unknown
	Method      string // "agent", "faulthandler" or "proc"
	ThreadCount int
	Stacks      json.RawMessage // nil or valid JSON
}

// Diagnosis is one analysis and its verdict.
type Diagnosis struct {
	ID           int64
	CreatedAt    time.Time // zero: the time of AddDiagnosis
	Kind         string    // e.g. "flight_recorder"
	Inputs       json.RawMessage
	Verdict      string // one line
	CulpritRanks string // a rank range string such as "0-3,7" (internal/rankset)
	Report       json.RawMessage
}

// Alert is one event of the watcher, as it was delivered.
type Alert struct {
	ID           int64
	At           time.Time // zero: the time of AddAlert
	Kind         string    // captured, stalled, dead, paused, moving, slow, blind, seeing
	Level        string    // info, warn, error
	Title        string
	Text         string
	Job, Host    string
	Incident     int64
	State        string
	Category     string
	CulpritRanks string
	Location     string // file:line (function)
	Confidence   string
	DiagnosisID  int64  // the verdict's row in diagnoses (0: none)
	Delivery     string // what the sinks did with it ("" when none were set)
	Headline     json.RawMessage
}

// AuditEntry is one half of a tool call: the call before it runs, or its
// result.
type AuditEntry struct {
	ID      int64
	At      time.Time // zero: the time of AddAudit
	Tool    string
	Phase   string // "call" or "result"
	Caller  string
	Args    json.RawMessage
	Outcome string
	Error   string
}

// The closed sets of values, checked in Go rather than by CHECK
// constraints so that a later binary can add a value without a migration.
var (
	formats = []string{"pickle", "json"}
	methods = []string{"agent", "faulthandler", "proc"}
	phases  = []string{"call", "result"}
)

// ListOptions page through a table, newest first.
type ListOptions struct {
	// Limit is the most rows returned: 0 means 100, and at most 10000.
	Limit int
	// BeforeID, when > 0, returns only rows with a smaller id: pass the
	// last id of one page to get the next.
	BeforeID int64
	// Rank, when set, keeps only rows recorded for that rank (snapshots
	// and stack captures; an error for the other tables).
	Rank *int
}

const (
	defaultLimit = 100
	maxLimit     = 10000
)

// AddSnapshot records a snapshot and returns its id. Data larger than
// Options.MaxBlobBytes is refused.
func (s *Store) AddSnapshot(r Snapshot) (int64, error) {
	if int64(len(r.Data)) > s.maxBlob {
		return 0, fmt.Errorf("history: snapshot data is %d bytes, over the %d-byte limit (Options.MaxBlobBytes)", len(r.Data), s.maxBlob)
	}
	if err := oneOf("snapshot format", r.Format, formats); err != nil {
		return 0, err
	}
	sum := sha256.Sum256(r.Data)
	data := r.Data
	if data == nil {
		data = []byte{} // NOT NULL: an empty dump is still a dump
	}
	return s.insert(`INSERT INTO fr_snapshots (taken_at_us, host, pid, rank, world_size, source, format,
		trace_version, entries, size_bytes, sha256, note, data) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		micros(r.TakenAt), r.Host, r.PID, nullInt(r.Rank), r.WorldSize, r.Source, r.Format,
		r.TraceVersion, r.Entries, len(data), hex.EncodeToString(sum[:]), r.Note, data)
}

// AddStackCapture records a stack capture and returns its id.
func (s *Store) AddStackCapture(r StackCapture) (int64, error) {
	if err := oneOf("stack capture method", r.Method, methods); err != nil {
		return 0, err
	}
	stacks, err := jsonText("stacks", r.Stacks)
	if err != nil {
		return 0, err
	}
	return s.insert(`INSERT INTO stack_captures (taken_at_us, host, pid, rank, method, thread_count, stacks_json)
		VALUES (?,?,?,?,?,?,?)`,
		micros(r.TakenAt), r.Host, r.PID, nullInt(r.Rank), r.Method, r.ThreadCount, stacks)
}

// AddDiagnosis records a diagnosis and returns its id.
func (s *Store) AddDiagnosis(r Diagnosis) (int64, error) {
	if r.Kind == "" {
		return 0, fmt.Errorf("history: diagnosis without a kind")
	}
	if strings.ContainsAny(r.Verdict, "\r\n") {
		return 0, fmt.Errorf("history: diagnosis verdict must be one line: %q", r.Verdict)
	}
	inputs, err := jsonText("diagnosis inputs", r.Inputs)
	if err != nil {
		return 0, err
	}
	report, err := jsonText("diagnosis report", r.Report)
	if err != nil {
		return 0, err
	}
	return s.insert(`INSERT INTO diagnoses (created_at_us, kind, inputs_json, verdict, culprit_ranks, report_json)
		VALUES (?,?,?,?,?,?)`,
		micros(r.CreatedAt), r.Kind, inputs, r.Verdict, r.CulpritRanks, report)
}

// AddAudit records an audit entry and returns its id.
func (s *Store) AddAudit(r AuditEntry) (int64, error) {
	if r.Tool == "" {
		return 0, fmt.Errorf("history: audit entry without a tool")
	}
	if err := oneOf("audit phase", r.Phase, phases); err != nil {
		return 0, err
	}
	args, err := jsonText("audit args", r.Args)
	if err != nil {
		return 0, err
	}
	return s.insert(`INSERT INTO audit (ts_us, tool, phase, caller, args_json, outcome, error) VALUES (?,?,?,?,?,?,?)`,
		micros(r.At), r.Tool, r.Phase, r.Caller, args, r.Outcome, r.Error)
}

// insert runs one INSERT as its own transaction (autocommit): when it
// returns, the row is on disk.
func (s *Store) insert(query string, args ...any) (_ int64, err error) {
	defer observeWrite(query, time.Now(), &err) // metrics.go
	if s.mode.ReadOnly {
		return 0, fmt.Errorf("history: %s: %w", s.path, ErrReadOnly)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	res, err := s.db.Exec(query, args...)
	if err != nil {
		return 0, s.wrap("writing to", err)
	}
	return res.LastInsertId()
}

// Snapshots lists snapshots, newest first, without their data.
func (s *Store) Snapshots(opt ListOptions) ([]Snapshot, error) {
	q, args, err := listQuery(`SELECT id, taken_at_us, host, pid, rank, world_size, source, format,
		trace_version, entries, size_bytes, sha256, note FROM fr_snapshots`, true, opt)
	if err != nil {
		return nil, err
	}
	return list(s, q, args, func(rows *sql.Rows) (Snapshot, error) {
		var r Snapshot
		var at int64
		var rank sql.NullInt64
		err := rows.Scan(&r.ID, &at, &r.Host, &r.PID, &rank, &r.WorldSize, &r.Source, &r.Format,
			&r.TraceVersion, &r.Entries, &r.SizeBytes, &r.SHA256, &r.Note)
		r.TakenAt, r.Rank = fromMicros(at), fromNull(rank)
		return r, err
	})
}

// SnapshotData returns the raw dump of snapshot id.
func (s *Store) SnapshotData(id int64) ([]byte, error) {
	var data []byte
	err := s.db.QueryRow("SELECT data FROM fr_snapshots WHERE id = ?", id).Scan(&data)
	if err == sql.ErrNoRows {
		return nil, fmt.Errorf("history: %s: no snapshot %d", s.path, id)
	}
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("reading snapshot %d from", id), err)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// AddAlert records one of the watcher's events and returns its id.
func (s *Store) AddAlert(r Alert) (int64, error) {
	if r.Kind == "" || r.Level == "" {
		return 0, fmt.Errorf("history: alert without a kind or a level")
	}
	head, err := jsonText("alert headline", r.Headline)
	if err != nil {
		return 0, err
	}
	var diag any
	if r.DiagnosisID > 0 {
		diag = r.DiagnosisID
	}
	return s.insert(`INSERT INTO alerts (at_us, kind, level, title, text, job, host, incident, state, category,
		culprit_ranks, location, confidence, diagnosis_id, delivery, headline_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		micros(r.At), r.Kind, r.Level, r.Title, r.Text, r.Job, r.Host, r.Incident, r.State, r.Category,
		r.CulpritRanks, r.Location, r.Confidence, diag, r.Delivery, head)
}

// Alerts lists the watcher's events, newest first; since, when not zero,
// keeps those at or after it.
func (s *Store) Alerts(opt ListOptions, since time.Time) ([]Alert, error) {
	// The since filter goes inside, so that listQuery's own WHERE (the
	// page) applies to what it kept.
	base := `SELECT id, at_us, kind, level, title, text, job, host, incident, state, category, culprit_ranks, location,
		confidence, diagnosis_id, delivery, headline_json FROM (SELECT * FROM alerts WHERE at_us >= ?)`
	q, args, err := listQuery(base, false, opt)
	if err != nil {
		return nil, err
	}
	args = append([]any{since.UnixMicro()}, args...)
	return list(s, q, args, func(rows *sql.Rows) (Alert, error) {
		var r Alert
		var at int64
		var diag sql.NullInt64
		var head sql.NullString
		err := rows.Scan(&r.ID, &at, &r.Kind, &r.Level, &r.Title, &r.Text, &r.Job, &r.Host, &r.Incident, &r.State, &r.Category,
			&r.CulpritRanks, &r.Location, &r.Confidence, &diag, &r.Delivery, &head)
		r.At, r.DiagnosisID, r.Headline = fromMicros(at), diag.Int64, rawJSON(head)
		return r, err
	})
}

// StackCaptures lists stack captures, newest first.
func (s *Store) StackCaptures(opt ListOptions) ([]StackCapture, error) {
	q, args, err := listQuery(`SELECT id, taken_at_us, host, pid, rank, method, thread_count, stacks_json
		FROM stack_captures`, true, opt)
	if err != nil {
		return nil, err
	}
	return list(s, q, args, func(rows *sql.Rows) (StackCapture, error) {
		var r StackCapture
		var at int64
		var rank sql.NullInt64
		var stacks sql.NullString
		err := rows.Scan(&r.ID, &at, &r.Host, &r.PID, &rank, &r.Method, &r.ThreadCount, &stacks)
		r.TakenAt, r.Rank, r.Stacks = fromMicros(at), fromNull(rank), rawJSON(stacks)
		return r, err
	})
}

// Diagnoses lists diagnoses, newest first.
func (s *Store) Diagnoses(opt ListOptions) ([]Diagnosis, error) {
	q, args, err := listQuery(`SELECT id, created_at_us, kind, inputs_json, verdict, culprit_ranks, report_json
		FROM diagnoses`, false, opt)
	if err != nil {
		return nil, err
	}
	return list(s, q, args, func(rows *sql.Rows) (Diagnosis, error) {
		var r Diagnosis
		var at int64
		var inputs, report sql.NullString
		err := rows.Scan(&r.ID, &at, &r.Kind, &inputs, &r.Verdict, &r.CulpritRanks, &report)
		r.CreatedAt, r.Inputs, r.Report = fromMicros(at), rawJSON(inputs), rawJSON(report)
		return r, err
	})
}

// Audit lists audit entries, newest first.
func (s *Store) Audit(opt ListOptions) ([]AuditEntry, error) {
	q, args, err := listQuery(`SELECT id, ts_us, tool, phase, caller, args_json, outcome, error FROM audit`, false, opt)
	if err != nil {
		return nil, err
	}
	return list(s, q, args, func(rows *sql.Rows) (AuditEntry, error) {
		var r AuditEntry
		var at int64
		var a sql.NullString
		err := rows.Scan(&r.ID, &at, &r.Tool, &r.Phase, &r.Caller, &a, &r.Outcome, &r.Error)
		r.At, r.Args = fromMicros(at), rawJSON(a)
		return r, err
	})
}

// listQuery adds the paging and the rank filter to a SELECT.
func listQuery(base string, hasRank bool, opt ListOptions) (string, []any, error) {
	limit := opt.Limit
	switch {
	case limit < 0:
		return "", nil, fmt.Errorf("history: negative list limit %d", limit)
	case limit == 0:
		limit = defaultLimit
	case limit > maxLimit:
		limit = maxLimit
	}
	var where []string
	var args []any
	if opt.BeforeID > 0 {
		where, args = append(where, "id < ?"), append(args, opt.BeforeID)
	}
	if opt.Rank != nil {
		if !hasRank {
			return "", nil, fmt.Errorf("history: this table has no rank to filter on")
		}
		where, args = append(where, "rank = ?"), append(args, *opt.Rank)
	}
	q := base
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q + " ORDER BY id DESC LIMIT ?", append(args, limit), nil
}

func list[T any](s *Store, q string, args []any, scan func(*sql.Rows) (T, error)) ([]T, error) {
	rows, err := s.db.Query(q, args...)
	if err != nil {
		return nil, s.wrap("listing", err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, s.wrap("listing", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("listing", err)
	}
	return out, nil
}

func micros(t time.Time) int64 {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UnixMicro()
}

// fromMicros returns times in UTC, so that a record reads back the same
// whatever the reader's zone.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func nullInt(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func fromNull(n sql.NullInt64) *int {
	if !n.Valid {
		return nil
	}
	v := int(n.Int64)
	return &v
}

// jsonText validates a JSON column: nil and empty are stored as NULL,
// anything else must parse, so that readers can trust a *_json column.
func jsonText(what string, m json.RawMessage) (any, error) {
	if len(m) == 0 {
		return nil, nil
	}
	if !json.Valid(m) {
		return nil, fmt.Errorf("history: %s are not valid JSON", what)
	}
	return string(m), nil
}

func rawJSON(n sql.NullString) json.RawMessage {
	if !n.Valid {
		return nil
	}
	return json.RawMessage(n.String)
}

func oneOf(what, v string, allowed []string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return fmt.Errorf("history: %s %q: want one of %s", what, v, strings.Join(allowed, ", "))
}
