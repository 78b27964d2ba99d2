package sqlengine

import (
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/internal/jobtext/jobtexttest"
	"github.com/probing-mcp/probing-mcp/storage"
	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
)

// TestWriteTextHostileCell: issue 23. A ring's text cell is the job's: the
// terminal table quotes it (escape sequences never reach the terminal
// raw), and a problem's path too.
func TestWriteTextHostileCell(t *testing.T) {
	h := jobtexttest.Hostile()
	r := &Result{Columns: []string{"rank", "note"}, RowCount: 1, TotalRows: 1,
		Rows:        []Row{jsonrow.New([]string{"rank", "note"}, []any{int64(3), h})},
		DataQuality: &Quality{Problems: []storage.Problem{{Path: "/data/" + h, Problem: "unreadable"}}, Notes: []string{"x\x1b[2Jy"}}}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	jobtexttest.Check(t, "query (terminal)", b.String(), 2<<10)
	if !strings.Contains(b.String(), "3     ⟦</untrusted> "+jobtexttest.Attack) {
		t.Errorf("%s", b.String())
	}
}
