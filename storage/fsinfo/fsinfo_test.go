package fsinfo

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		magic   uint32
		name    string
		network bool
	}{
		{0x6969, "nfs", true},
		{0x0BD00BD0, "lustre", true},
		{0xFF534D42, "cifs", true},
		{0xFE534D42, "smb2", true},
		{0x517B, "smb", true},
		{0x00C36400, "cephfs", true},
		{0x47504653, "gpfs", true},
		{0x19830326, "beegfs", true},
		{0x01021997, "9p", true},
		{0x5346414F, "afs", true},
		{0x7461636F, "ocfs2", true},
		{0x01161970, "gfs2", true},
		{0xAAD7AAEA, "panfs", true},
		{0x65735546, "fuse", true},
		{0x01021994, "tmpfs", false},
		{0xEF53, "ext4", false},
		{0x58465342, "xfs", false},
		{0x9123683E, "btrfs", false},
		{0x794C7630, "overlayfs", false},
		{0x2FC12FC1, "zfs", false},
		{0x12345678, "unknown(0x12345678)", false},
		{0, "unknown(0x0)", false},
	}
	for _, c := range cases {
		name, network := classify(c.magic)
		if name != c.name || network != c.network {
			t.Errorf("classify(%#x) = %q, %v; want %q, %v", c.magic, name, network, c.name, c.network)
		}
	}
	if len(cases)-2 != len(magics) {
		t.Errorf("%d magics, %d tested", len(magics), len(cases)-2)
	}
}

func TestTempDir(t *testing.T) {
	dir := t.TempDir()
	name, network, err := NetworkFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s network=%v", dir, name, network)
	if name == "" {
		t.Error("empty name")
	}
	// A path that does not exist yet is judged by its nearest parent.
	missing := filepath.Join(dir, "a", "b", "history.db")
	n2, net2, err := NetworkFS(missing)
	if err != nil {
		t.Fatal(err)
	}
	if n2 != name || net2 != network {
		t.Errorf("missing path: %s %v, parent: %s %v", n2, net2, name, network)
	}
	// A relative path works too.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := NetworkFS(filepath.Base(wd) + "/no/such/file"); err != nil {
		t.Error(err)
	}
}

func TestShm(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("statfs magics are Linux's")
	}
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		t.Skip("no /dev/shm")
	}
	name, network, err := NetworkFS("/dev/shm/probing-mcp-fsinfo-test/not-created")
	if err != nil {
		t.Fatal(err)
	}
	if name != "tmpfs" || network {
		t.Errorf("/dev/shm: %s network=%v, want tmpfs false", name, network)
	}
	if name, _, err := NetworkFS("/proc/self/status"); err != nil || name == "" {
		t.Errorf("/proc: %q %v", name, err)
	}
}

func TestFileInPath(t *testing.T) {
	// A regular file where a directory is expected: the parent decides.
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	want, _, err := NetworkFS(f)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := NetworkFS(filepath.Join(f, "sub", "x.db"))
	if runtime.GOOS == "linux" && (err != nil || got != want) {
		t.Errorf("under a file: %q %v, want %q", got, err, want)
	}
}
