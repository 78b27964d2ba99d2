package sqlengine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/storage/history"
)

// TestHistoryAttachRefusesPlanted: SQLite follows links, so a history.db
// that is a symlink (to a database of anyone's) or sits in a directory
// others can write is not attached, and the answer's data quality says
// why; the real one still is.
func TestHistoryAttachRefusesPlanted(t *testing.T) {
	real := filepath.Join(t.TempDir(), "state", "history.db")
	h, err := history.Open(real, history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	query := func(path string) (*Result, error) {
		e, err := New(Options{DataDir: t.TempDir(), HistoryPath: path})
		if err != nil {
			t.Fatal(err)
		}
		return e.Query(context.Background(), "SELECT count(*) AS n FROM history.diagnoses", 10)
	}
	if _, err := query(real); err != nil {
		t.Fatalf("the real history: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "probing-mcp")
	os.Mkdir(dir, 0o700)
	link := filepath.Join(dir, "history.db")
	os.Symlink(real, link)
	for _, c := range []struct{ what, want string }{
		{"symlink", "symbolic link"},
		{"world-writable dir", "writable by other users"},
	} {
		if c.what == "world-writable dir" {
			os.Remove(link)
			b, _ := os.ReadFile(real)
			os.WriteFile(link, b, 0o600)
			os.Chmod(dir, 0o777)
		}
		res, err := query(link)
		if err == nil {
			t.Errorf("%s: history was attached: %+v", c.what, res)
			continue
		}
		if !strings.Contains(err.Error(), "history") {
			t.Errorf("%s: %v", c.what, err)
		}
		// The reason is in the data quality of a query that succeeds.
		e, _ := New(Options{DataDir: t.TempDir(), HistoryPath: link})
		r, qerr := e.Query(context.Background(), "SELECT 1 AS x", 10)
		if qerr != nil || r.DataQuality == nil || !strings.Contains(problemText(r.DataQuality), c.want) {
			t.Errorf("%s: data quality %+v %v, want %q", c.what, r, qerr, c.want)
		}
	}
}

func problemText(q *Quality) string {
	var b strings.Builder
	for _, p := range q.Problems {
		b.WriteString(p.Path + ": " + p.Problem + "\n")
	}
	return b.String()
}
