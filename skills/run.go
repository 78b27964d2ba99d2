package skills

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
)

// The runner executes a bound skill against a Backend (contract §6.4) and
// builds Probing's run JSON (§6.7). It is surface-neutral: the MCP tool, the
// CLI and tests each supply a Backend.
//
// Decisions where the contract is loose or where this dialect extends it:
//   - Step tables are {"columns":[…],"rows":[{col:val},…]} (rows are objects
//     keyed by column, keys in column order), not Probing's serialised
//     DataFrame ({"names","cols","size"}). Cells are JSON scalars; text cells
//     longer than RunOptions.MaxCellBytes are cut with a marker, NaN and ±Inf
//     become strings.
//   - Every bound is reported: a step whose rows or text were cut has
//     "truncated": true; a result shrunk to fit MaxResultBytes has a
//     top-level "truncated": true as well. Rules always see the rows the
//     query returned (up to MaxRows), never the shrunk copy.
//   - sql steps ask the backend for MaxRows+1 rows; more than MaxRows back
//     means the step was truncated at MaxRows.
//   - The fan-out decision (cluster: true, or the SQL names global.) reaches
//     Backend.Query through the context: see Fanout.
//   - A query error is "skipped" under on_empty: skip and "error" otherwise
//     (§6.4), except a refusal (*RefusedError: SQL the read-only guard
//     rejects, a write tool, a tool the server lacks), which is always
//     "error": it is a defect of the skill, not missing data.
//   - api paths are expanded (string values URL-escaped) in run as in plan;
//     Probing's run sends the path literally, placeholders and all.
//   - An empty api body: warn → ok with "(empty response — step may be
//     unavailable)" (§6.4); skip → skipped ("No data"); abort → error.
//   - tool steps (extension): the tool's JSON, compacted, is the step text.
//     The result is empty when it is null, {}, [], or holds a table with no
//     rows; on_empty then applies as for sql. The JSON also becomes rule
//     evidence when it holds a table (see ToolTable), so rules can read tool
//     results as they read SQL results. A tool in RunOptions.WriteTools is
//     refused unless AllowWrite; run_skill is always refused (recursion).
//   - Evidence for rules: sql outcomes (ok, degraded, and warn with zero
//     rows: an empty table, so `rows == 0` can hold) plus tool tables. api
//     text is never evidence, as in Probing.
//   - After an error on an on_empty: abort step the run stops; the steps
//     not run are listed as skipped with the reason, so the agent sees
//     which evidence is missing.
//   - Context cancellation is checked between steps: Run returns
//     ctx.Err() (wrapped), no partial result.
//   - {worst_rank}, {top_module} and {latest_step} in messages are filled
//     from steps rank_latency (the rank column of the row with the largest
//     avg_ms), module_totals (the module column of the row with the largest
//     pct_time) and latest_torch_step (its step column, first row), when
//     those steps produced evidence and no parameter has that name.
//   - The summary expands the context, {step.row_count} (0 for a step
//     without evidence) and {step.<col>} (first row).

// Backend runs what steps ask for. Implementations must be safe for the
// runner's sequential use; nothing is called concurrently.
type Backend interface {
	// Query runs read-only SQL with a row limit. Refused SQL is an error
	// (wrap it in *RefusedError). A degraded fan-out returns the table and
	// a *PartialError.
	Query(ctx context.Context, sql string, limit int) (*Table, error)
	// CallTool calls one of this server's read-only tools and returns its
	// structured JSON. A tool the server lacks, or a write tool, is refused
	// (*RefusedError).
	CallTool(ctx context.Context, name string, args map[string]string) (json.RawMessage, error)
	// Get performs an agent GET (api steps) and returns the body.
	Get(ctx context.Context, path string) (string, error)
	// PeerCount is the number of other nodes in the job (node total − 1).
	PeerCount(ctx context.Context) (int, error)
}

// PartialError reports a cluster fan-out's coverage. Returned with a table
// from Backend.Query it marks the step "degraded" when some node failed or
// a peer batch was dropped. A backend may also return one with no failures
// to report how many nodes a complete fan-out reached: the step is then ok,
// with its note and cluster_meta filled.
type PartialError struct {
	NodesQueried       int
	NodesFailed        []string
	PeerBatchesDropped int
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("partial cluster fan-out: %d nodes queried, %d failed, %d peer batches dropped", e.NodesQueried, len(e.NodesFailed), e.PeerBatchesDropped)
}

// Partial reports whether the fan-out missed data.
func (e *PartialError) Partial() bool { return len(e.NodesFailed) > 0 || e.PeerBatchesDropped > 0 }

// RefusedError is a backend's refusal: SQL the read-only guard rejects, a
// write tool, a tool the server lacks. Its message is Err's.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// Refuse wraps err as a refusal (nil stays nil).
func Refuse(err error) error {
	if err == nil {
		return nil
	}
	return &RefusedError{Err: err}
}

type fanoutKey struct{}

// WithFanout marks ctx for a query that must fan out cluster-wide.
func WithFanout(ctx context.Context, fanout bool) context.Context {
	return context.WithValue(ctx, fanoutKey{}, fanout)
}

// Fanout reports whether the runner asked Backend.Query to fan out: the
// step has cluster: true or its SQL names a global. table. A backend that
// routes by the global. prefix alone may ignore it.
func Fanout(ctx context.Context) bool {
	v, _ := ctx.Value(fanoutKey{}).(bool)
	return v
}

// Defaults of RunOptions.
const (
	DefaultMaxRows        = 200
	DefaultMaxTextBytes   = 16 << 10
	DefaultMaxCellBytes   = 4 << 10
	DefaultMaxResultBytes = 1 << 20
)

// RunOptions tune a run. Zero values take the defaults.
type RunOptions struct {
	MaxRows        int // rows kept per step (evidence and result)
	MaxTextBytes   int // api/tool text per step, and the summary
	MaxCellBytes   int // one text cell in the result's rows
	MaxResultBytes int // the whole result's JSON
	// UI: ui steps get status "ui" instead of being skipped.
	UI bool
	// WriteTools names the server's write tools; a tool step calling one
	// is refused unless AllowWrite.
	WriteTools map[string]bool
	AllowWrite bool
	// GOOS overrides runtime.GOOS for platform checks (tests).
	GOOS string
}

func (o *RunOptions) defaults() {
	if o.MaxRows <= 0 {
		o.MaxRows = DefaultMaxRows
	}
	if o.MaxTextBytes <= 0 {
		o.MaxTextBytes = DefaultMaxTextBytes
	}
	if o.MaxCellBytes <= 0 {
		o.MaxCellBytes = DefaultMaxCellBytes
	}
	if o.MaxResultBytes <= 0 {
		o.MaxResultBytes = DefaultMaxResultBytes
	}
}

// StepStatus is a step outcome (§6.7).
type StepStatus string

const (
	StatusOK       StepStatus = "ok"
	StatusDegraded StepStatus = "degraded"
	StatusSkipped  StepStatus = "skipped"
	StatusError    StepStatus = "error"
	StatusUI       StepStatus = "ui"
)

// ClusterMeta is a fan-out step's coverage (§6.7).
type ClusterMeta struct {
	Partial            bool     `json:"partial"`
	NodesQueried       int      `json:"nodes_queried"`
	NodesFailed        []string `json:"nodes_failed"`
	PeerBatchesDropped int      `json:"peer_batches_dropped"`
}

// Row is one result row: an object whose keys keep column order.
type Row = jsonrow.Row

// StepResult is one step of the run JSON (§6.7). Columns and Rows are this
// dialect's table shape (Probing has "dataframe").
type StepResult struct {
	StepID      string       `json:"step_id"`
	Title       string       `json:"title"`
	Status      StepStatus   `json:"status"`
	RowCount    *int         `json:"row_count,omitempty"`
	Note        string       `json:"note,omitempty"`
	ClusterMeta *ClusterMeta `json:"cluster_meta,omitempty"`
	Columns     []string     `json:"columns,omitempty"`
	Rows        []Row        `json:"rows,omitempty"`
	Text        string       `json:"text,omitempty"`
	View        string       `json:"view,omitempty"`
	Reason      string       `json:"reason,omitempty"`
	Message     string       `json:"message,omitempty"`
	Truncated   bool         `json:"truncated,omitempty"`
	DurationMS  int64        `json:"duration_ms"`
}

// DataQuality is the run's data-quality section.
type DataQuality struct {
	PartialClusterFanout bool `json:"partial_cluster_fanout"`
}

// RunResult is the run JSON (§6.7).
type RunResult struct {
	SkillID     string            `json:"skill_id"`
	Title       string            `json:"title"`
	Parameters  map[string]string `json:"parameters"` // normalised overrides only
	Steps       []StepResult      `json:"steps"`
	Findings    []Finding         `json:"findings"`
	Summary     string            `json:"summary"`
	NextSteps   []string          `json:"next_steps"`
	Status      StepStatus        `json:"status"` // ok, degraded or error
	DataQuality DataQuality       `json:"data_quality"`
	Truncated   bool              `json:"truncated,omitempty"` // shrunk to MaxResultBytes
	DurationMS  int64             `json:"duration_ms"`
	// Evidence is what the rules saw, by step id (not serialised).
	Evidence map[string]*Table `json:"-"`
}

const (
	emptyAPIText  = "(empty response — step may be unavailable)"
	noDataReason  = "No data"
	noRowsMessage = "Query returned no rows"
	maxMsgBytes   = 4 << 10
	maxToolParse  = 8 << 20
	maxToolCols   = 256
)

// Run binds the overrides and runs the skill's steps in order (§6.4), then
// evaluates its rules. The error is for what stops the whole run: bad
// overrides, peer discovery failing, cancellation. Step failures are in
// the result (Status "error").
func Run(ctx context.Context, s *Skill, overrides map[string]string, b Backend, opt RunOptions) (*RunResult, error) {
	opt.defaults()
	start := time.Now()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("skill `%s`: %w", s.ID, err)
	}
	bind, err := s.Bind(overrides, BindOptions{GOOS: opt.GOOS, PeerCount: func() (int, error) { return b.PeerCount(ctx) }})
	if err != nil {
		return nil, err
	}
	res := &RunResult{
		SkillID: s.ID, Title: skillTitle(s), Parameters: bind.Overrides,
		Steps: []StepResult{}, Findings: []Finding{}, NextSteps: []string{},
		Evidence: map[string]*Table{},
	}
	r := &runner{ctx: ctx, b: b, opt: opt, bind: bind, res: res, raw: map[string]json.RawMessage{}}
	var partial []Finding
	steps := s.Steps.Spec.Steps
	for i := range steps {
		st := &steps[i]
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("skill `%s` stopped before step `%s`: %w", s.ID, st.ID, err)
		}
		t0 := time.Now()
		sr, ev := r.step(st)
		sr.DurationMS = time.Since(t0).Milliseconds()
		if ev != nil {
			res.Evidence[st.ID] = ev
		}
		if m := sr.ClusterMeta; m != nil && m.Partial {
			partial = append(partial, Finding{RuleID: st.ID + "_partial_fanout", Severity: SeverityError, Message: fmt.Sprintf(
				"Cluster fan-out incomplete for step '%s': %d nodes queried, %d failed, %d peer batches dropped — do not treat results as complete",
				st.ID, m.NodesQueried, len(m.NodesFailed), m.PeerBatchesDropped)})
			res.DataQuality.PartialClusterFanout = true
		}
		res.Steps = append(res.Steps, sr)
		if sr.Status == StatusError && st.OnEmpty == "abort" {
			for _, rest := range steps[i+1:] {
				res.Steps = append(res.Steps, StepResult{StepID: rest.ID, Title: rest.Title, Status: StatusSkipped,
					Reason: fmt.Sprintf("not run: step `%s` (on_empty: abort) failed", st.ID)})
			}
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("skill `%s`: %w", s.ID, err)
	}
	env := &Env{Params: withSpecialPlaceholders(bind.Values, res.Evidence), Evidence: res.Evidence}
	for _, st := range steps {
		env.Order = append(env.Order, st.ID)
	}
	for _, f := range Evaluate(s.Steps.Spec.Rules, env) {
		f.Message, _ = boundText(f.Message, maxMsgBytes)
		res.Findings = append(res.Findings, f)
	}
	if v := s.Steps.Spec.VerdictStep; v != "" {
		var sr *StepResult
		for i := range res.Steps {
			if res.Steps[i].StepID == v {
				sr = &res.Steps[i]
			}
		}
		fs, sum := verdict(v, r.raw[v], sr)
		res.Findings = append(fs, res.Findings...)
		res.Summary, _ = boundText(sum, opt.MaxTextBytes)
	}
	res.Findings = append(res.Findings, partial...)
	if tmpl := s.Steps.Spec.SummaryTemplate; tmpl != "" {
		for _, st := range steps {
			if res.Evidence[st.ID] == nil {
				tmpl = strings.ReplaceAll(tmpl, "{"+st.ID+".row_count}", "0")
			}
		}
		res.Summary, _ = boundText(ExpandMessage(tmpl, env), opt.MaxTextBytes)
	}
	res.NextSteps = append(res.NextSteps, s.Steps.Spec.NextSteps...)
	res.Status = StatusOK
	for _, sr := range res.Steps {
		if sr.Status == StatusError {
			res.Status = StatusError
			break
		}
		if sr.Status == StatusDegraded {
			res.Status = StatusDegraded
		}
	}
	res.DurationMS = time.Since(start).Milliseconds()
	shrink(res, opt.MaxResultBytes)
	return res, nil
}

func skillTitle(s *Skill) string {
	switch {
	case s.Title != "":
		return s.Title
	case s.Steps != nil && s.Steps.Metadata.Title != "":
		return s.Steps.Metadata.Title
	}
	return s.ID
}

type runner struct {
	ctx  context.Context
	b    Backend
	opt  RunOptions
	bind *Binding
	res  *RunResult
	// raw keeps each tool step's whole answer (the verdict step's is
	// decoded, not the bounded text).
	raw map[string]json.RawMessage
}

// step runs one step and returns its result and its rule evidence.
func (r *runner) step(st *Step) (StepResult, *Table) {
	sr := StepResult{StepID: st.ID, Title: st.Title}
	e, err := r.bind.Expand(st)
	if err != nil {
		sr.Status, sr.Message = StatusError, err.Error()
		return sr, nil
	}
	// Expand gives a ui step its "run the Web UI" reason unless a platform
	// or use_global skip came first; with the UI option that one becomes
	// status ui.
	if e.Type == StepUI && r.opt.UI && e.SkipReason == uiSkipReason(e.View) {
		sr.Status, sr.View = StatusUI, e.View
		return sr, nil
	}
	if e.SkipReason != "" {
		sr.Status, sr.Reason = StatusSkipped, e.SkipReason
		return sr, nil
	}
	switch e.Type {
	case StepSQL:
		return r.sqlStep(&e, sr)
	case StepTool:
		return r.toolStep(&e, sr)
	case StepAPI:
		return r.apiStep(&e, sr), nil
	}
	sr.Status, sr.Message = StatusError, fmt.Sprintf("step type %q cannot run", e.Type)
	return sr, nil
}

func uiSkipReason(view string) string {
	return fmt.Sprintf("ui step (view=%s) — run probing Web UI for navigation", view)
}

// empty applies on_empty to a step that produced nothing. ok reports that
// the step goes on (warn) rather than ending skipped or in error.
func empty(e *ExpandedStep, sr *StepResult, abortMsg string) bool {
	switch e.OnEmpty {
	case "warn":
		return true
	case "abort":
		sr.Status, sr.Message = StatusError, orDefault(e.EmptyMessage, abortMsg)
	default:
		sr.Status, sr.Reason = StatusSkipped, orDefault(e.EmptyMessage, noDataReason)
	}
	return false
}

func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// failed records a backend error: error when refused or on_empty is not
// skip, else skipped.
func failed(e *ExpandedStep, sr *StepResult, err error) {
	var ref *RefusedError
	if e.OnEmpty == "skip" && !errors.As(err, &ref) {
		sr.Status, sr.Reason = StatusSkipped, err.Error()
	} else {
		sr.Status, sr.Message = StatusError, err.Error()
	}
	sr.Reason, _ = boundText(sr.Reason, maxMsgBytes)
	sr.Message, _ = boundText(sr.Message, maxMsgBytes)
}

func (r *runner) sqlStep(e *ExpandedStep, sr StepResult) (StepResult, *Table) {
	t, err := r.b.Query(WithFanout(r.ctx, e.Fanout), e.SQL, r.opt.MaxRows+1)
	var pe *PartialError
	if errors.As(err, &pe) && t != nil {
		err = nil
		sr.ClusterMeta = &ClusterMeta{Partial: pe.Partial(), NodesQueried: pe.NodesQueried, NodesFailed: slices.Clone(pe.NodesFailed), PeerBatchesDropped: pe.PeerBatchesDropped}
		if sr.ClusterMeta.NodesFailed == nil {
			sr.ClusterMeta.NodesFailed = []string{}
		}
		sr.Note = fmt.Sprintf("cluster fan-out · %d nodes queried · %d failed · %d peer batches dropped", pe.NodesQueried, len(pe.NodesFailed), pe.PeerBatchesDropped)
	} else if err == nil && e.Fanout {
		sr.Note = "cluster fan-out"
	}
	if err != nil {
		failed(e, &sr, err)
		return sr, nil
	}
	if t == nil {
		t = &Table{}
	}
	ev := &Table{Columns: t.Columns, Rows: t.Rows}
	if len(ev.Rows) > r.opt.MaxRows {
		ev.Rows = ev.Rows[:r.opt.MaxRows]
		sr.Truncated = true
	}
	if len(ev.Rows) == 0 && !empty(e, &sr, noRowsMessage) {
		return sr, nil
	}
	sr.Status = StatusOK
	if sr.ClusterMeta != nil && sr.ClusterMeta.Partial {
		sr.Status = StatusDegraded
	}
	n := len(ev.Rows)
	sr.RowCount = &n
	sr.Columns, sr.Rows = resultRows(ev, r.opt.MaxCellBytes, &sr.Truncated)
	return sr, ev
}

func (r *runner) toolStep(e *ExpandedStep, sr StepResult) (StepResult, *Table) {
	switch {
	case e.Tool == "run_skill":
		failed(e, &sr, Refuse(errors.New("tool `run_skill` cannot be called from a skill step (recursion)")))
		return sr, nil
	case r.opt.WriteTools[e.Tool] && !r.opt.AllowWrite:
		failed(e, &sr, Refuse(fmt.Errorf("tool `%s` is a write tool; a skill step that needs a write tool is refused unless writes are allowed", e.Tool)))
		return sr, nil
	}
	raw, err := r.b.CallTool(r.ctx, e.Tool, e.Args)
	if err != nil {
		failed(e, &sr, err)
		return sr, nil
	}
	raw = bytes.TrimSpace(raw)
	var compact bytes.Buffer
	if json.Compact(&compact, raw) == nil {
		raw = compact.Bytes()
	}
	r.raw[e.ID] = raw
	t, trunc, found := ToolTable(raw, r.opt.MaxRows)
	blank := len(raw) == 0 || string(raw) == "null" || string(raw) == "{}" || string(raw) == "[]"
	if (blank || found && len(t.Rows) == 0) && !empty(e, &sr, "Tool returned no data") {
		return sr, nil
	}
	sr.Status = StatusOK
	if len(raw) == 0 {
		sr.Text = emptyAPIText
	} else {
		var cut bool
		sr.Text, cut = boundText(string(raw), r.opt.MaxTextBytes)
		sr.Truncated = cut || trunc
	}
	if !found {
		return sr, nil
	}
	n := len(t.Rows)
	sr.RowCount = &n
	return sr, t
}

func (r *runner) apiStep(e *ExpandedStep, sr StepResult) StepResult {
	body, err := r.b.Get(r.ctx, e.Path)
	if err != nil {
		sr.Status, sr.Message = StatusError, err.Error()
		sr.Message, _ = boundText(sr.Message, maxMsgBytes)
		return sr
	}
	if strings.TrimSpace(body) == "" {
		if !empty(e, &sr, "Empty response") {
			return sr
		}
		sr.Status, sr.Text = StatusOK, emptyAPIText
		return sr
	}
	sr.Status = StatusOK
	sr.Text, sr.Truncated = boundText(body, r.opt.MaxTextBytes)
	return sr
}

// resultRows converts evidence to the result's row objects, bounding cells.
func resultRows(t *Table, maxCell int, truncated *bool) ([]string, []Row) {
	cols := t.Columns
	if cols == nil {
		cols = []string{}
	}
	rows := make([]Row, len(t.Rows))
	for i, tr := range t.Rows {
		vals := make([]any, len(cols))
		for j := range cols {
			if j < len(tr) {
				var cut bool
				vals[j], cut = jsonCell(tr[j], maxCell)
				*truncated = *truncated || cut
			}
		}
		rows[i] = jsonrow.New(cols, vals)
	}
	return cols, rows
}

// jsonCell makes a cell JSON-safe and bounds its text.
func jsonCell(v any, maxCell int) (any, bool) {
	switch x := v.(type) {
	case nil, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, json.Number, time.Time:
		return x, false
	case float32:
		return jsonCell(float64(x), maxCell)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return strconv.FormatFloat(x, 'g', -1, 64), false
		}
		return x, false
	case string:
		return boundText(x, maxCell)
	case []byte:
		return boundText(string(x), maxCell)
	}
	return boundText(fmt.Sprint(v), maxCell)
}

// boundText cuts s to at most max bytes (on a UTF-8 boundary), marker
// included, and reports whether it did.
func boundText(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	// The marker with len(s) for both numbers is at least as long as the
	// final one.
	keep := max - len(fmt.Sprintf(" … [truncated: %d of %d bytes kept]", len(s), len(s)))
	if keep < 0 {
		keep = 0
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + fmt.Sprintf(" … [truncated: %d of %d bytes kept]", keep, len(s)), true
}

// withSpecialPlaceholders adds {worst_rank}, {top_module} and
// {latest_step} to a copy of the context (§6.6).
func withSpecialPlaceholders(params map[string]string, ev map[string]*Table) map[string]string {
	out := make(map[string]string, len(params)+3)
	for k, v := range params {
		out[k] = v
	}
	set := func(name string, v any, ok bool) {
		if _, taken := out[name]; !taken && ok {
			out[name] = text(v)
		}
	}
	argmax := func(step, by string, want ...string) (any, bool) {
		t := ev[step]
		if t == nil {
			return nil, false
		}
		bi, col := t.col(by), -1
		for _, w := range want {
			if col = t.col(w); col >= 0 {
				break
			}
		}
		if bi < 0 || col < 0 {
			return nil, false
		}
		best, row := math.Inf(-1), -1
		for i, rw := range t.Rows {
			if bi < len(rw) {
				if f, ok := number(rw[bi]); ok && f > best {
					best, row = f, i
				}
			}
		}
		if row < 0 || col >= len(t.Rows[row]) {
			return nil, false
		}
		return t.Rows[row][col], true
	}
	v, ok := argmax("rank_latency", "avg_ms", "rank", "_rank", "global_rank")
	set("worst_rank", v, ok)
	v, ok = argmax("module_totals", "pct_time", "module", "module_name", "name")
	set("top_module", v, ok)
	if t := ev["latest_torch_step"]; t != nil && len(t.Rows) > 0 {
		for _, c := range []string{"step", "latest_step", "max_step"} {
			if i := t.col(c); i >= 0 && i < len(t.Rows[0]) {
				set("latest_step", t.Rows[0][i], true)
				break
			}
		}
	}
	return out
}

// shrink cuts the largest steps' rows and text until the result's JSON
// fits max bytes, flagging what it cut.
func shrink(res *RunResult, max int) {
	size := func(v any) int {
		b, _ := json.Marshal(v)
		return len(b)
	}
	steps := res.Steps
	res.Steps = nil
	base := size(res) + 2
	res.Steps = steps
	sizes := make([]int, len(steps))
	total := base
	for i := range steps {
		sizes[i] = size(steps[i]) + 1
		total += sizes[i]
	}
	for total > max {
		best := -1
		for i := range steps {
			if (len(steps[i].Rows) > 0 || steps[i].Text != "") && (best < 0 || sizes[i] > sizes[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		st := &steps[best]
		switch {
		case len(st.Rows) > 1:
			st.Rows = st.Rows[:len(st.Rows)/2]
		case len(st.Rows) == 1:
			st.Rows = nil
		case len(st.Text) > 256:
			st.Text, _ = boundText(st.Text, len(st.Text)/2)
		default:
			st.Text = ""
		}
		st.Truncated, res.Truncated = true, true
		total -= sizes[best]
		sizes[best] = size(*st) + 1
		total += sizes[best]
	}
}
