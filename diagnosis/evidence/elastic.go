package evidence

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
)

// withElasticError adds what torchelastic's @record wrote for a dead rank
// (its TORCHELASTIC_ERROR_FILE, the path its agent recorded while it
// lived) when the agent's own records hold no exception: a worker whose
// exception torch's wrapper caught never reaches the agent's excepthook.
// The error file's exception then stands in for the agent's record, so
// the order of deaths and the culprit's line come from it. A file that
// cannot be believed is a problem, and nothing of it is used.
func withElasticError(e *RankEvidence, a *agent.Agent, problem func(string, ...any)) {
	id := a.Identity
	if e.Alive || id == nil || id.TorchelasticErrorFile == "" || (e.Record != nil && e.Record.Exception != nil) {
		return
	}
	p := id.TorchelasticErrorFile
	if !filepath.IsAbs(p) {
		problem("rank %d's torchelastic error file is not an absolute path: not read", e.Rank)
		return
	}
	ee, err := procfacts.ReadElasticError(p, procfacts.Owner{UID: a.UID, GID: -1})
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			problem("rank %d's torchelastic error file %s is not used: %v", e.Rank, jobtext.QuoteTail(p, jobtext.Path), err)
		}
		return
	}
	if ee == nil || ee.Type == "" && len(ee.Frames) == 0 {
		// The old format's plain message ("Signal 9 received"): no
		// exception of the rank's own.
		return
	}
	var rec procfacts.Ending
	if e.Record != nil {
		rec = *e.Record
	}
	rec.Exception, rec.Exceptions = ee.Record(), max(rec.Exceptions, 1)
	e.Record, e.Raised = &rec, true
	e.EndedNS = EndedNS(&rec)
	if rec.Exit == nil && len(rec.Signals) == 0 {
		// Nothing says how the process ended, only what it raised: not
		// "killed without a record", which the error file contradicts.
		e.Ending = "raised " + strings.TrimPrefix(rec.Summary(true), "after ") + " (torchelastic's error file)"
	} else {
		e.Ending = rec.Summary(false) + " (torchelastic's error file)"
	}
}
