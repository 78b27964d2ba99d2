package membership

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
)

func TestDefaultPath(t *testing.T) {
	for id, want := range map[string]string{
		"job-42":    "/d/probing-mcp/cluster/job-42.json",
		"":          "/d/probing-mcp/cluster/default.json",
		"../../x":   "/d/probing-mcp/cluster/_.._x.json",
		"..":        "/d/probing-mcp/cluster/default.json",
		"a/b c\x00": "/d/probing-mcp/cluster/a_b_c_.json",
	} {
		if got := DefaultPath("/d", id); got != want {
			t.Errorf("%q: %s, want %s", id, got, want)
		}
	}
	if got := DefaultPath("/d", strings.Repeat("x", 1000)); len(filepath.Base(got)) > 140 {
		t.Errorf("long id: %s", got)
	}
}

func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	path := DefaultPath(dir, "r1")
	ns := []cluster.Node{
		{Host: "a", Addr: "10.0.0.1:9781", NodeRank: 0, Ranks: "0-7", Kind: cluster.KindDaemon, Source: "store", LastSeen: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{Host: "::1", Addr: "[::1]:9922", NodeRank: -1, Kind: cluster.KindProbing, Source: "peers"},
	}
	if err := Save(path, ns); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%v %v", st, err)
	}
	if st, _ := os.Stat(filepath.Dir(path)); st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v", st.Mode())
	}
	got, err := Load(path)
	if err != nil || len(got) != 2 {
		t.Fatal(got, err)
	}
	ns[0].Source, ns[1].Source = "disk", "disk"
	for i := range ns {
		if got[i] != ns[i] {
			t.Errorf("%+v != %+v", got[i], ns[i])
		}
	}
	// Overwrite leaves no temporary files behind.
	if err := Save(path, ns[:1]); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	if got, _ := Load(path); len(got) != 1 {
		t.Errorf("after overwrite: %v", got)
	}
	if err := Save(filepath.Join(dir, "empty.json"), nil); err != nil {
		t.Fatal(err)
	}
	if got, err := Load(filepath.Join(dir, "empty.json")); err != nil || len(got) != 0 {
		t.Errorf("empty: %v %v", got, err)
	}
}

func TestLoadUntrusted(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	for name, c := range map[string]struct{ body, want string }{
		"garbage":  {"{not json", "not a JSON list"},
		"object":   {`{"host":"a"}`, "not a JSON list"},
		"badaddr":  {`[{"addr":"nope"}]`, "node 0"},
		"huge":     {"[" + strings.Repeat(" ", MaxFile) + "]", "over 4194304 bytes"},
		"overlong": {"[" + strings.Repeat(`{"addr":"a:1"},`, MaxNodes) + `{"addr":"a:1"}]`, "over 16384"},
	} {
		_, err := Load(write(name, c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Load(filepath.Join(dir, "absent")); err == nil {
		t.Error("absent file loaded")
	}
	if err := Save(filepath.Join(write("file", "x"), "sub", "m.json"), nil); err == nil {
		t.Error("saved under a file")
	}
}
