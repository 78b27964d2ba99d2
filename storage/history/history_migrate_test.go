package history

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // raw access to the files in tests
)

func TestNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	s := openT(t, path, Options{})
	if _, err := s.AddDiagnosis(Diagnosis{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db := raw(t, path)
	if _, err := db.Exec("PRAGMA user_version = 7"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, ro := range []bool{false, true} {
		for _, detect := range []func(string) (string, bool, error){local, network} {
			_, err := Open(path, Options{ReadOnly: ro, DetectFS: detect})
			if !errors.Is(err, ErrNewerSchema) {
				t.Fatalf("ro=%v: %v", ro, err)
			}
			for _, want := range []string{path, "v7", fmt.Sprintf("v%d", SchemaVersion)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("ro=%v: %q does not say %q", ro, err, want)
				}
			}
		}
	}
	// Refused before anything was written: still WAL, still v7.
	db = raw(t, path)
	if v := pragma(t, db, "journal_mode"); v != "wal" {
		t.Errorf("journal_mode changed to %s", v)
	}
	if v := pragma(t, db, "user_version"); v != "7" {
		t.Errorf("user_version %s", v)
	}
}

// TestUpgrade writes a v1 database with the first migration only, then
// opens it with the current migrations and with a further test migration.
func TestUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	v1, err := open(path, Options{DetectFS: local}, migrations[:1])
	if err != nil {
		t.Fatal(err)
	}
	if v1.Mode().Version != 1 {
		t.Fatalf("v1 mode %+v", v1.Mode())
	}
	did, err := v1.AddDiagnosis(Diagnosis{Kind: "flight_recorder", Verdict: "v1 verdict", CulpritRanks: "3"})
	if err != nil {
		t.Fatal(err)
	}
	sid, err := v1.AddSnapshot(Snapshot{Format: "json", Rank: intp(3), Data: []byte(`{"entries":[]}`)})
	if err != nil {
		t.Fatal(err)
	}
	v1.Close()

	cur := openT(t, path, Options{})
	if cur.Mode().Version != SchemaVersion {
		t.Errorf("current: %+v", cur.Mode())
	}
	if ds, err := cur.Diagnoses(ListOptions{}); err != nil || len(ds) != 1 || ds[0].ID != did || ds[0].Verdict != "v1 verdict" {
		t.Errorf("after reopen: %+v %v", ds, err)
	}
	cur.Close()

	next := append(append([]string{}, migrations...),
		`ALTER TABLE diagnoses ADD COLUMN confidence REAL NOT NULL DEFAULT 0;
		 UPDATE diagnoses SET confidence = 0.5;`)
	up, err := open(path, Options{DetectFS: local}, next)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	if up.Mode().Version != len(next) {
		t.Errorf("upgraded: %+v", up.Mode())
	}
	var verdict string
	var conf float64
	if err := up.db.QueryRow("SELECT verdict, confidence FROM diagnoses WHERE id = ?", did).Scan(&verdict, &conf); err != nil ||
		verdict != "v1 verdict" || conf != 0.5 {
		t.Errorf("upgraded row: %q %v %v", verdict, conf, err)
	}
	if d, err := up.SnapshotData(sid); err != nil || string(d) != `{"entries":[]}` {
		t.Errorf("upgraded snapshot: %q %v", d, err)
	}
	// The old binary now refuses the file.
	if _, err := Open(path, Options{DetectFS: local}); !errors.Is(err, ErrNewerSchema) {
		t.Errorf("old binary on upgraded file: %v", err)
	}
}

// TestFailedMigration: a migration that fails half-way leaves no trace.
func TestFailedMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	s := openT(t, path, Options{})
	if _, err := s.AddAudit(AuditEntry{Tool: "t", Phase: "call"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	bad := append(append([]string{}, migrations...),
		`CREATE TABLE half (x); INSERT INTO audit (ts_us, tool, phase) VALUES (1, 'x', 'call'); INSERT INTO nosuch VALUES (1);`)
	if _, err := open(path, Options{DetectFS: local}, bad); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("migration to v%d", SchemaVersion+1)) {
		t.Fatalf("bad migration: %v", err)
	}
	db := raw(t, path)
	if v := pragma(t, db, "user_version"); v != fmt.Sprint(SchemaVersion) {
		t.Errorf("user_version %s", v)
	}
	var n int
	db.QueryRow("SELECT count(*) FROM sqlite_master WHERE name = 'half'").Scan(&n)
	if n != 0 {
		t.Error("table of the failed migration is visible")
	}
	db.QueryRow("SELECT count(*) FROM audit").Scan(&n)
	if n != 1 {
		t.Errorf("%d audit rows", n)
	}
	db.Close()
	if s, err := Open(path, Options{DetectFS: local}); err != nil {
		t.Errorf("reopen after failed migration: %v", err)
	} else {
		s.Close()
	}
}

// TestConcurrentStores: two Stores (as two servers would) on one file,
// created at the same moment, written from many goroutines.
func TestConcurrentStores(t *testing.T) {
	for _, detect := range []func(string) (string, bool, error){local, network} {
		name, _, _ := detect("")
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "h.db")
			stores := make([]*Store, 2)
			var wg sync.WaitGroup
			errs := make(chan error, 1000)
			for i := range stores {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, err := Open(path, Options{DetectFS: detect})
					if err != nil {
						errs <- err
						return
					}
					stores[i] = s
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			defer stores[0].Close()
			defer stores[1].Close()

			const goroutines, each = 8, 25
			ids := make(chan int64, goroutines*each*2)
			errs = make(chan error, goroutines*each*2)
			for g := 0; g < goroutines; g++ {
				s := stores[g%2]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						id, err := s.AddDiagnosis(Diagnosis{Kind: "k", Verdict: fmt.Sprint(g, i)})
						if err != nil {
							errs <- err
							return
						}
						ids <- id
						if _, err := s.Diagnoses(ListOptions{Limit: 5}); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			close(ids)
			for err := range errs {
				t.Fatal(err)
			}
			seen := map[int64]bool{}
			for id := range ids {
				if seen[id] {
					t.Errorf("id %d twice", id)
				}
				seen[id] = true
			}
			all, err := stores[1].Diagnoses(ListOptions{Limit: maxLimit})
			if err != nil || len(all) != goroutines*each || len(seen) != goroutines*each {
				t.Errorf("%d rows, %d ids, %v", len(all), len(seen), err)
			}
		})
	}
}

func BenchmarkAddDiagnosis(b *testing.B) {
	s := openT(b, filepath.Join(b.TempDir(), "h.db"), Options{})
	report := json.RawMessage(`{"groups":[{"name":"0","verdict":"rank 3 missing"}]}`)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.AddDiagnosis(Diagnosis{Kind: "flight_recorder", Verdict: "rank 3 missing", CulpritRanks: "3", Report: report}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestOddPath: characters that mean something in a URI stay in the name.
func TestOddPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a ?b#c%20d&mode=ro")
	path := filepath.Join(dir, "h.db")
	s := openT(t, path, Options{})
	if _, err := s.AddDiagnosis(Diagnosis{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("%s: %v", path, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(dir))
	if len(entries) != 1 || entries[0].Name() != filepath.Base(dir) {
		t.Errorf("files beside the directory: %v", entries)
	}
}

// TestAlertsMigrationAndRoundTrip: a v1 file gains the alerts table
// (its rows kept), and an alert reads back as written, newest first,
// filtered by time.
func TestAlertsMigrationAndRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	v1, err := open(path, Options{DetectFS: local}, migrations[:1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v1.AddDiagnosis(Diagnosis{Kind: "hang", Verdict: "v1 verdict"}); err != nil {
		t.Fatal(err)
	}
	v1.Close()
	s := openT(t, path, Options{})
	defer s.Close()
	if ds, err := s.Diagnoses(ListOptions{}); err != nil || len(ds) != 1 {
		t.Fatalf("v1 rows after the upgrade: %+v %v", ds, err)
	}
	t0 := time.Unix(1_800_000_000, 0).UTC()
	for i, k := range []string{"captured", "stalled", "moving"} {
		if _, err := s.AddAlert(Alert{At: t0.Add(time.Duration(i) * time.Minute), Kind: k, Level: "error", Title: "job " + k,
			Incident: 7, CulpritRanks: "2", DiagnosisID: 1, Headline: json.RawMessage(`{"state":"stalled"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.AddAlert(Alert{Title: "no kind"}); err == nil {
		t.Error("an alert without a kind was recorded")
	}
	if _, err := s.AddAlert(Alert{Kind: "x", Level: "info", Headline: json.RawMessage(`{bad`)}); err == nil {
		t.Error("an alert with a broken headline was recorded")
	}
	all, err := s.Alerts(ListOptions{}, time.Time{})
	if err != nil || len(all) != 3 || all[0].Kind != "moving" || all[2].DiagnosisID != 1 || string(all[1].Headline) != `{"state":"stalled"}` ||
		!all[2].At.Equal(t0) {
		t.Fatalf("alerts: %+v %v", all, err)
	}
	since, err := s.Alerts(ListOptions{Limit: 1}, t0.Add(30*time.Second))
	if err != nil || len(since) != 1 || since[0].Kind != "moving" {
		t.Fatalf("since, limit 1: %+v %v", since, err)
	}
	page2, err := s.Alerts(ListOptions{BeforeID: since[0].ID}, t0.Add(30*time.Second))
	if err != nil || len(page2) != 1 || page2[0].Kind != "stalled" {
		t.Fatalf("next page: %+v %v", page2, err)
	}
}
