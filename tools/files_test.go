package tools

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func mustPolicy(t *testing.T, env map[string]string, workDir, dataDir string) FilePolicy {
	t.Helper()
	p, err := NewFilePolicy(envOf(env), workDir, dataDir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func touch(t *testing.T, files ...string) {
	t.Helper()
	for _, f := range files {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func wantOutside(t *testing.T, p FilePolicy, path string) string {
	t.Helper()
	_, err := p.Check(path)
	if err == nil || !strings.Contains(err.Error(), "is outside the allowed directories") {
		t.Fatalf("Check(%s) = %v, want outside the allowed directories", path, err)
	}
	return strings.ReplaceAll(err.Error(), path, "PATH")
}

func TestFilePolicyExplicit(t *testing.T) {
	root := t.TempDir()
	inside := filepath.Join(root, "dumps")
	mkdirs(t, inside, inside+"-other")
	p := mustPolicy(t, map[string]string{"PROBING_ALLOWED_FILE_DIRS": inside + ":" + filepath.Join(root, "later") + ": :"}, "/wd", "/data")
	if !p.FromEnv || len(p.Roots) != 2 || p.Roots[0].Why != "PROBING_ALLOWED_FILE_DIRS" {
		t.Fatalf("%+v", p)
	}
	if real, err := p.Check(inside); err != nil || real != inside {
		t.Errorf("allowed dir: %q %v", real, err)
	}
	wantOutside(t, p, root)
	if _, err := p.Check(root); !strings.Contains(err.Error(), "add the directory to PROBING_ALLOWED_FILE_DIRS") ||
		!strings.Contains(err.Error(), "("+inside+", "+filepath.Join(root, "later")+")") {
		msg := err.Error()
		t.Errorf("message %q should list the roots and name the variable", msg)
	}
	wantOutside(t, p, inside+"-other") // shares the prefix, is not inside
	wantOutside(t, p, filepath.Join(inside, "..", ".."))
	// A root that does not exist yet still counts; inside a root, a
	// missing path is said to be missing.
	if _, err := p.Check(filepath.Join(root, "later", "x")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing path inside a root: %v", err)
	}
}

// TestFilePolicyRefusesSystemRoots: an explicit root that is or contains a
// system directory (or the home directory), or lies inside /proc, /etc and
// the like, is refused at start with the entry, the reason and the fix.
func TestFilePolicyRefusesSystemRoots(t *testing.T) {
	home := t.TempDir()
	link := filepath.Join(t.TempDir(), "to-root")
	if err := os.Symlink("/", link); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		"/":                "is the root of the file system",
		"/etc":             "is the system directory /etc",
		"/usr/":            "is the system directory /usr",
		"/var":             "is the system directory /var",
		"/proc/self":       "is inside the system directory /proc",
		"/etc/ssh":         "is inside the system directory /etc",
		"/dev/disk":        "is inside the system directory /dev",
		"/run/secrets":     "is inside the system directory /run",
		home:               "is the home directory",
		filepath.Dir(home): "contains the home directory",
		link:               "resolves to /, which is the root of the file system",
	}
	for entry, want := range bad {
		_, err := NewFilePolicy(envOf(map[string]string{"HOME": home, "PROBING_ALLOWED_FILE_DIRS": "/data/ok:" + entry}), "/wd", "/data")
		if err == nil {
			t.Errorf("%s: accepted", entry)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, fmt.Sprintf("PROBING_ALLOWED_FILE_DIRS entry %q", entry)) || !strings.Contains(msg, want) ||
			!strings.Contains(msg, "name the directories that hold the dumps") {
			t.Errorf("%s: error %q should name the entry, say it %s, and how to fix it", entry, msg, want)
		}
	}
	for _, ok := range []string{"/dev/shm/probing", "/dev/shm", "/tmp", "/var/log/fr", "/root/project", "/usr/local/share/dumps", "/home/someone/dumps"} {
		if _, err := NewFilePolicy(envOf(map[string]string{"HOME": "/home/someone", "PROBING_ALLOWED_FILE_DIRS": ok}), "/wd", "/data"); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
}

// TestFilePolicyDefaults is the reported hole: started in / with no
// PROBING_ALLOWED_FILE_DIRS, the roots are the data dir and torch's dump
// locations, never / itself.
func TestFilePolicyDefaults(t *testing.T) {
	home, data := t.TempDir(), t.TempDir()
	p := mustPolicy(t, map[string]string{"HOME": home, "PROBING_DATA_DIR": data}, "/", data)
	var roots []string
	for _, r := range p.Roots {
		roots = append(roots, r.String()+" ("+r.Why+")")
	}
	want := []string{
		data + " (the data dir (PROBING_DATA_DIR))",
		filepath.Join(home, ".cache", "torch") + " (torch's default Flight Recorder dump directory (newer releases))",
		"/tmp/nccl_trace_rank_* (torch's documented default Flight Recorder dump files (older releases), by name only (/tmp is shared))",
	}
	if strings.Join(roots, "\n") != strings.Join(want, "\n") {
		t.Errorf("roots:\n%s\nwant:\n%s", strings.Join(roots, "\n"), strings.Join(want, "\n"))
	}
	if len(p.Skipped) != 1 || p.Skipped[0].Path != "/" || !strings.Contains(p.Skipped[0].Why, "root of the file system") {
		t.Errorf("skipped %+v, want the working directory / and why", p.Skipped)
	}
	for _, path := range []string{"/etc/shadow", "/proc/self/environ", "/", home, "/tmp/krb5cc_0"} {
		wantOutside(t, p, path)
	}
	touch(t, filepath.Join(data, "ring"))
	if _, err := p.Check(filepath.Join(data, "ring")); err != nil {
		t.Errorf("data dir: %v", err)
	}

	// In /tmp only torch's dump files are allowed, by name; /tmp itself
	// is refused with a hint.
	dump := fmt.Sprintf("%stest%d", torchLegacyDumpPrefix, os.Getpid())
	touch(t, dump)
	defer os.Remove(dump)
	if real, err := p.Check(dump); err != nil || real != dump {
		t.Errorf("%s: %q %v", dump, real, err)
	}
	wantOutside(t, p, "/tmp")
	if _, err := p.Check("/tmp"); !strings.Contains(err.Error(), "Only the files named /tmp/nccl_trace_rank_* are allowed there") {
		msg := err.Error()
		t.Errorf("/tmp refusal %q should say which files are allowed there", msg)
	}
	// A dump-named symlink in /tmp that points elsewhere leads outside.
	trap := fmt.Sprintf("%strap%d", torchLegacyDumpPrefix, os.Getpid())
	if err := os.Symlink("/etc/passwd", trap); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(trap)
	wantOutside(t, p, trap)
}

func TestFilePolicyDumpPrefixVariables(t *testing.T) {
	job := t.TempDir()
	cases := []struct {
		value, root, skipped string
	}{
		{filepath.Join(job, "fr", "rank_"), filepath.Join(job, "fr"), ""},
		{filepath.Join(job, "fr") + "/", filepath.Join(job, "fr"), ""},
		{"/tmp/myjob_rank_", "/tmp/myjob_rank_*", ""},
		{"/tmp/", "", "names no file prefix in the shared /tmp"},
		{"fr/rank_", "", "relative to the training job's directory"},
		{"/etc/fr_", "", "is the system directory /etc"},
	}
	for _, tc := range cases {
		p := mustPolicy(t, map[string]string{"HOME": job, "TORCH_FR_DUMP_TEMP_FILE": tc.value}, "", "")
		var roots []string
		for _, r := range p.Roots {
			roots = append(roots, r.String())
		}
		if got := strings.Join(roots, ","); got != tc.root {
			t.Errorf("TORCH_FR_DUMP_TEMP_FILE=%s: roots %q, want %q (and no torch defaults)", tc.value, got, tc.root)
		}
		if tc.skipped != "" && (len(p.Skipped) != 1 || !strings.Contains(p.Skipped[0].Why, tc.skipped)) {
			t.Errorf("TORCH_FR_DUMP_TEMP_FILE=%s: skipped %+v, want %q", tc.value, p.Skipped, tc.skipped)
		}
	}
	p := mustPolicy(t, map[string]string{"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": filepath.Join(job, "old_"), "XDG_CACHE_HOME": "/c"}, "", "")
	if len(p.Roots) != 1 || p.Roots[0].Path != job || !strings.Contains(p.Roots[0].Why, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE") {
		t.Errorf("older variable: %+v", p.Roots)
	}
	p = mustPolicy(t, map[string]string{"XDG_CACHE_HOME": "/c"}, "", "")
	if p.Roots[0].Path != "/c/torch" {
		t.Errorf("XDG_CACHE_HOME: %+v", p.Roots)
	}
}

// TestFilePolicyWorkDir: the working directory is a root only when it is a
// project directory, or inside one short of the home directory.
func TestFilePolicyWorkDir(t *testing.T) {
	tmp := t.TempDir()
	home := filepath.Join(tmp, "home")
	proj := filepath.Join(home, "proj")
	plain := filepath.Join(home, "downloads")
	mkdirs(t, filepath.Join(proj, "sub", "deeper"), plain, filepath.Join(home, ".git"), filepath.Join(tmp, "elsewhere"))
	touch(t, filepath.Join(proj, "pyproject.toml"))
	cases := []struct {
		wd, why string
		ok      bool
	}{
		{proj, "a project directory (it holds pyproject.toml)", true},
		{filepath.Join(proj, "sub", "deeper"), "inside the project " + proj + " (it holds pyproject.toml)", true},
		{plain, "not a project directory", false}, // the home directory's .git does not count
		{home, "is the home directory", false},
		{tmp, "contains the home directory", false},
		{filepath.Join(tmp, "elsewhere"), "not a project directory", false},
		{"/etc", "is the system directory /etc", false},
		{"/usr", "is the system directory /usr", false},
		{"/", "is the root of the file system", false},
	}
	for _, tc := range cases {
		p := mustPolicy(t, map[string]string{"HOME": home, "TORCH_FR_DUMP_TEMP_FILE": "/tmp/x_"}, tc.wd, "")
		var wd *FileRoot
		for i, r := range append(p.Roots, p.Skipped...) {
			if r.Path == tc.wd {
				wd = &append(p.Roots, p.Skipped...)[i]
				if (i < len(p.Roots)) != tc.ok {
					t.Errorf("%s: allowed=%v, want %v", tc.wd, i < len(p.Roots), tc.ok)
				}
			}
		}
		if wd == nil || !strings.Contains(wd.Why, tc.why) {
			t.Errorf("%s: %#v, want the reason %q", tc.wd, wd, tc.why)
		}
	}
	p := mustPolicy(t, map[string]string{"HOME": "/home/someone", "TORCH_FR_DUMP_TEMP_FILE": "/tmp/x_"}, "/tmp", "")
	if len(p.Skipped) != 1 || !strings.Contains(p.Skipped[0].Why, "shared temporary directory") {
		t.Errorf("/tmp as the working directory: %+v", p)
	}
}

// TestFilePolicySymlinks: symlinks are followed only while they stay in
// the roots, and every way out gets the same answer as a path written
// outside, existing or not.
func TestFilePolicySymlinks(t *testing.T) {
	tmp := t.TempDir()
	root, outside := filepath.Join(tmp, "root"), filepath.Join(tmp, "outside")
	mkdirs(t, filepath.Join(root, "dumps"), outside)
	touch(t, filepath.Join(root, "dumps", "r0"), filepath.Join(outside, "secret"))
	links := map[string]string{
		"in":       "dumps/r0",
		"abs-in":   filepath.Join(root, "dumps"),
		"out":      filepath.Join(outside, "secret"),
		"out-dir":  outside,
		"dangling": filepath.Join(outside, "no-such-file"),
		"dotdot":   "../outside/secret",
		"up":       "..",
		"loop":     "loop",
		"chain":    "in",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	// The root itself is named through a symlink; both forms work.
	alias := filepath.Join(tmp, "alias")
	if err := os.Symlink(root, alias); err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t, map[string]string{"PROBING_ALLOWED_FILE_DIRS": alias}, "", "")
	if p.Roots[0].Path != alias || p.Roots[0].Real != root {
		t.Fatalf("root %+v", p.Roots[0])
	}
	for _, path := range []string{filepath.Join(alias, "in"), filepath.Join(root, "chain"), filepath.Join(alias, "abs-in", "r0")} {
		if real, err := p.Check(path); err != nil || real != filepath.Join(root, "dumps", "r0") {
			t.Errorf("%s: %q %v", path, real, err)
		}
	}
	lexical := wantOutside(t, p, filepath.Join(outside, "secret"))
	missing := wantOutside(t, p, filepath.Join(outside, "no-such-file"))
	if lexical != missing {
		t.Errorf("outside, existing and missing are told apart:\n  %s\n  %s", lexical, missing)
	}
	for _, name := range []string{"out", "out-dir", "dangling", "dotdot", "up"} {
		if got := wantOutside(t, p, filepath.Join(alias, name)); got != lexical {
			t.Errorf("%s: %q, want the same answer as a path outside: %q", name, got, lexical)
		}
	}
	if _, err := p.Check(filepath.Join(alias, "loop")); err == nil || !strings.Contains(err.Error(), "more than 40 symlinks") {
		t.Errorf("loop: %v", err)
	}
	// A file met while walking a root is vetted the same way, and the
	// message does not say where the link leads.
	if err := p.checkResolved(filepath.Join(root, "out")); err == nil || strings.Contains(err.Error(), outside) {
		t.Errorf("walked symlink out: %v", err)
	}
	if err := p.checkResolved(filepath.Join(root, "in")); err != nil {
		t.Errorf("walked symlink in: %v", err)
	}
}

// FuzzFilePolicyCheck: whatever the path, Check either refuses it or
// returns a fully resolved path inside the root, never one outside.
func FuzzFilePolicyCheck(f *testing.F) {
	tmp := f.TempDir()
	root, outside := filepath.Join(tmp, "root"), filepath.Join(tmp, "outside")
	for _, d := range []string{filepath.Join(root, "dumps"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	for _, file := range []string{filepath.Join(root, "dumps", "r0"), filepath.Join(outside, "secret")} {
		if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
			f.Fatal(err)
		}
	}
	for name, target := range map[string]string{"in": "dumps/r0", "out": outside, "up": "..", "loop": "loop", "abs": root} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			f.Fatal(err)
		}
	}
	p, err := NewFilePolicy(envOf(map[string]string{"PROBING_ALLOWED_FILE_DIRS": root}), "", "")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"in", "out/secret", "up/outside/secret", "abs/in", "dumps/../../outside/secret", "loop/x", "./dumps//r0/"} {
		f.Add(root + "/" + s)
	}
	f.Add("/etc/passwd")
	f.Add("relative/path")
	f.Fuzz(func(t *testing.T, path string) {
		real, err := p.Check(path)
		if err != nil {
			return
		}
		if !within(real, root) {
			t.Fatalf("Check(%q) = %q, outside the root %s", path, real, root)
		}
		if resolved, err := filepath.EvalSymlinks(real); err != nil || resolved != real {
			t.Fatalf("Check(%q) = %q, which resolves to %q (%v)", path, real, resolved, err)
		}
	})
}

// TestFilePolicyBareEnvironment: spawned without HOME, the server still
// knows the home directory (from the user database) and keeps it out.
func TestFilePolicyBareEnvironment(t *testing.T) {
	u, err := user.Current()
	if err != nil || u.HomeDir == "" || u.HomeDir == "/" {
		t.Skipf("no home directory for the current user: %v", err)
	}
	p := mustPolicy(t, nil, u.HomeDir, "")
	for _, r := range p.Roots {
		if r.Path == u.HomeDir {
			t.Fatalf("the home directory %s is a root: %+v", u.HomeDir, r)
		}
	}
	if _, err := NewFilePolicy(envOf(nil), "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFilePolicy(envOf(map[string]string{"PROBING_ALLOWED_FILE_DIRS": u.HomeDir}), "", ""); err == nil {
		t.Errorf("PROBING_ALLOWED_FILE_DIRS=%s (the home directory) accepted without HOME set", u.HomeDir)
	}
}
