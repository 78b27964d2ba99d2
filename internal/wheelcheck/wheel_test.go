package wheelcheck

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A real dynamically linked system binary stands in for the Go binary:
// /bin/true links only libc and needs whatever glibc this system ships.
func systemBinary(t *testing.T) ([]byte, Binary) {
	t.Helper()
	data, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skipf("no /bin/true to inspect: %v", err)
	}
	b, err := Inspect(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return data, b
}

func hostArch() string {
	return map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
}

type entry struct {
	name string
	data []byte
	mode os.FileMode
}

// buildWheel writes a wheel as pypi/probing_mcp_build.py lays it out;
// mutate edits its entries (and may skip the RECORD line of one).
func buildWheel(t *testing.T, version string, tags []string, bin []byte, mutate func(*[]entry, map[string]bool)) string {
	t.Helper()
	di := "probing_mcp-" + version + ".dist-info/"
	var tagLines string
	for _, tg := range tags {
		tagLines += "Tag: py3-none-" + tg + "\n"
	}
	es := []entry{
		{"probing_mcp/__init__.py", []byte("from ._version import __version__\n"), 0o644},
		{"probing_mcp/__main__.py", []byte("def main(): pass\n"), 0o644},
		{"probing_mcp/_version.py", []byte("__version__ = '" + version + "'\n"), 0o644},
		{BinaryPath, bin, 0o755},
		{"probing_mcp_agent/__init__.py", []byte("__version__ = '" + version + "'\n"), 0o644},
		{"probing_mcp_agent/_hook.py", []byte("\n"), 0o644},
		{di + "METADATA", []byte("Metadata-Version: 2.1\nName: probing-mcp\nVersion: " + version + "\nRequires-Python: >=3.9\n\ntext\n"), 0o644},
		{di + "WHEEL", []byte("Wheel-Version: 1.0\nRoot-Is-Purelib: false\n" + tagLines), 0o644},
		{di + "entry_points.txt", []byte("[console_scripts]\nprobing-mcp = probing_mcp.__main__:main\n"), 0o644},
	}
	unrecorded := map[string]bool{}
	if mutate != nil {
		mutate(&es, unrecorded)
	}
	var rec strings.Builder
	for _, e := range es {
		if unrecorded[e.name] {
			continue
		}
		sum := sha256.Sum256(e.data)
		fmt.Fprintf(&rec, "%s,sha256=%s,%d\n", e.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(e.data))
	}
	rec.WriteString(di + "RECORD,,\n")
	es = append(es, entry{di + "RECORD", []byte(rec.String()), 0o644})
	path := filepath.Join(t.TempDir(), fmt.Sprintf("probing_mcp-%s-py3-none-%s.whl", version, strings.Join(tags, ".")))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	z := zip.NewWriter(f)
	for _, e := range es {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		h.SetMode(e.mode)
		w, err := z.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(e.data)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

func check(t *testing.T, path string, opt Options) Result {
	t.Helper()
	res, err := Check(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func hasProblem(res Result, substr string) bool {
	for _, p := range res.Problems {
		if strings.Contains(p, substr) {
			return true
		}
	}
	return false
}

func TestInspectSystemBinary(t *testing.T) {
	_, b := systemBinary(t)
	if b.Machine != hostArch() {
		t.Errorf("machine %q, want %q", b.Machine, hostArch())
	}
	// Every glibc binary imports symbols versioned GLIBC_2.2.5 (x86_64)
	// or GLIBC_2.17 (aarch64) at least: a parser that found none is broken.
	if !(Version{2, 2}).Less(b.GLIBC) && b.GLIBC != (Version{2, 2}) {
		t.Errorf("highest glibc %s from %q: the versions were not read", b.GLIBC, b.GLIBCSymbol)
	}
	if !strings.Contains(strings.Join(b.Needed, " "), "libc.so.6") {
		t.Errorf("needed %v, want libc.so.6", b.Needed)
	}
}

func TestLocalWheelPasses(t *testing.T) {
	bin, _ := systemBinary(t)
	res := check(t, buildWheel(t, "1.2.3", []string{"linux_" + hostArch()}, bin, nil), Options{Version: "1.2.3"})
	if len(res.Problems) > 0 {
		t.Fatalf("a consistent wheel has problems: %v", res.Problems)
	}
	if res.Files != 9 || res.MaxGLIBC != nil {
		t.Fatalf("files %d, bound %v", res.Files, res.MaxGLIBC)
	}
}

// The cautionary case: built on a current distribution, tagged as if for
// an old one. The check reads the binary and refuses the claim.
func TestGLIBCAboveTheTagFails(t *testing.T) {
	bin, b := systemBinary(t)
	tag := Version{2, 17}
	if !tag.Less(b.GLIBC) {
		t.Skipf("this system's /bin/true needs only glibc %s: no binary here to break the 2.17 claim", b.GLIBC)
	}
	arch := hostArch()
	res := check(t, buildWheel(t, "1.2.3", []string{"manylinux_2_17_" + arch, "manylinux2014_" + arch}, bin, nil), Options{})
	if !hasProblem(res, "above the tag's 2.17") {
		t.Fatalf("a glibc %s binary passed as manylinux_2_17: %v", b.GLIBC, res.Problems)
	}
	// The same binary under a tag it honours passes.
	honest := fmt.Sprintf("manylinux_%d_%d_%s", b.GLIBC.Major, b.GLIBC.Minor, arch)
	if res := check(t, buildWheel(t, "1.2.3", []string{honest}, bin, nil), Options{}); len(res.Problems) > 0 {
		t.Fatalf("%s: %v", honest, res.Problems)
	}
}

func TestInconsistentWheelsFail(t *testing.T) {
	bin, _ := systemBinary(t)
	arch := hostArch()
	local := []string{"linux_" + arch}
	other := map[string]string{"x86_64": "aarch64", "aarch64": "x86_64"}[arch]
	cases := []struct {
		name   string
		tags   []string
		opt    Options
		mutate func(*[]entry, map[string]bool)
		want   string
	}{
		{"wrong machine", []string{"linux_" + other}, Options{}, nil, "the binary is for " + arch},
		{"version skew", local, Options{Version: "9.9.9"}, nil, "VERSION says 9.9.9"},
		{"too heavy", local, Options{MaxBytes: 1000}, nil, "over the"},
		// Edited after RECORD was written: see retamper.
		{"tampered file", local, Options{}, nil, ""},
		{"file not in RECORD", local, Options{}, func(es *[]entry, skip map[string]bool) {
			*es = append(*es, entry{"probing_mcp/extra.py", []byte("x"), 0o644})
			skip["probing_mcp/extra.py"] = true
		}, "probing_mcp/extra.py is in the wheel but not in RECORD"},
		{"not executable", local, Options{}, func(es *[]entry, _ map[string]bool) {
			for i := range *es {
				if (*es)[i].name == BinaryPath {
					(*es)[i].mode = 0o644
				}
			}
		}, "is not executable"},
		{"no agent", local, Options{}, func(es *[]entry, _ map[string]bool) {
			var keep []entry
			for _, e := range *es {
				if !strings.HasPrefix(e.name, "probing_mcp_agent/") {
					keep = append(keep, e)
				}
			}
			*es = keep
		}, "probing_mcp_agent/__init__.py is missing"},
		{"purelib", local, Options{}, func(es *[]entry, _ map[string]bool) {
			for i := range *es {
				if strings.HasSuffix((*es)[i].name, "/WHEEL") {
					(*es)[i].data = bytes.Replace((*es)[i].data, []byte("false"), []byte("true"), 1)
				}
			}
		}, "Root-Is-Purelib"},
		{"old python", local, Options{}, func(es *[]entry, _ map[string]bool) {
			for i := range *es {
				if strings.HasSuffix((*es)[i].name, "/METADATA") {
					(*es)[i].data = bytes.Replace((*es)[i].data, []byte(">=3.9"), []byte(">=3.6"), 1)
				}
			}
		}, "Requires-Python"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "tampered file" {
				// Tamper after RECORD: rebuild with RECORD of the original.
				path := buildWheel(t, "1.2.3", c.tags, bin, nil)
				path = retamper(t, path, "probing_mcp/__init__.py")
				res := check(t, path, c.opt)
				if !hasProblem(res, "probing_mcp/__init__.py does not match RECORD") {
					t.Fatalf("%v", res.Problems)
				}
				return
			}
			res := check(t, buildWheel(t, "1.2.3", c.tags, bin, c.mutate), c.opt)
			if !hasProblem(res, c.want) {
				t.Fatalf("want a problem with %q, got %v", c.want, res.Problems)
			}
		})
	}
}

// retamper rewrites one entry of a wheel, keeping its RECORD.
func retamper(t *testing.T, path, name string) string {
	t.Helper()
	z, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	f, _ := os.Create(out)
	w := zip.NewWriter(f)
	for _, e := range z.File {
		rc, _ := e.Open()
		var buf bytes.Buffer
		buf.ReadFrom(rc)
		rc.Close()
		data := buf.Bytes()
		if e.Name == name {
			data = append(data, []byte("import os\n")...)
		}
		h := e.FileHeader
		h.Method = zip.Deflate
		fw, _ := w.CreateHeader(&h)
		fw.Write(data)
	}
	w.Close()
	f.Close()
	return out
}

func TestBadInputIsAnError(t *testing.T) {
	dir := t.TempDir()
	notZip := filepath.Join(dir, "probing_mcp-1.0.0-py3-none-linux_x86_64.whl")
	os.WriteFile(notZip, []byte("not a zip"), 0o644)
	if _, err := Check(notZip, Options{}); err == nil || !strings.Contains(err.Error(), "not a zip") {
		t.Fatalf("%v", err)
	}
	odd := filepath.Join(dir, "other-1.0.whl")
	os.WriteFile(odd, nil, 0o644)
	if _, err := Check(odd, Options{}); err == nil || !strings.Contains(err.Error(), "file name") {
		t.Fatalf("%v", err)
	}
	if _, err := Inspect(bytes.NewReader([]byte("#!/bin/sh\n"))); err == nil {
		t.Fatal("a script inspected as ELF")
	}
	if _, _, err := platformBound("win_amd64"); err == nil {
		t.Fatal("win_amd64 accepted")
	}
}

func TestVersions(t *testing.T) {
	for in, want := range map[string]Version{"GLIBC_2.17": {2, 17}, "GLIBC_2.2.5": {2, 2}, "GLIBC_2.34": {2, 34}} {
		if got, ok := parseGLIBC(in); !ok || got != want {
			t.Errorf("%s: %v %v", in, got, ok)
		}
	}
	for _, in := range []string{"GLIBCXX_3.4", "GLIBC_PRIVATE", "GLIBC_2"} {
		if _, ok := parseGLIBC(in); ok {
			t.Errorf("%s parsed", in)
		}
	}
	arch, max, err := platformBound("manylinux_2_28_aarch64")
	if err != nil || arch != "aarch64" || *max != (Version{2, 28}) {
		t.Fatalf("%s %v %v", arch, max, err)
	}
}
