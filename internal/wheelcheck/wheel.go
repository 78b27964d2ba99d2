package wheelcheck

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// BinaryPath is where the wheel carries the Go binary.
const BinaryPath = "probing_mcp/bin/probing-mcp"

// Options bound the check.
type Options struct {
	Version  string // the version the wheel must carry ("" for any)
	MaxBytes int64  // the most the wheel file may weigh (0 for no bound)
}

// Result is one wheel's check: Problems empty when it is what it claims.
type Result struct {
	Path     string
	Bytes    int64
	Version  string
	Tags     []string // platform tags from the file name
	Arch     string
	MaxGLIBC *Version // the bound the tags set (nil: linux_<arch>, this machine only)
	Binary   Binary
	Files    int // entries RECORD lists and the check verified
	Problems []string
}

// Summary is one line for the build log.
func (r Result) Summary() string {
	verdict := "OK"
	if len(r.Problems) > 0 {
		verdict = fmt.Sprintf("%d problem(s)", len(r.Problems))
	}
	bound := "no glibc bound (this machine's own build)"
	if r.MaxGLIBC != nil {
		bound = "tag allows glibc " + r.MaxGLIBC.String()
	}
	return fmt.Sprintf("%s: %s; %.1f MB; %s binary needs glibc %s (%s); links %s; RECORD: %d files verified",
		filepath.Base(r.Path), verdict, float64(r.Bytes)/1e6, r.Binary.Machine, r.Binary.GLIBC, bound,
		strings.Join(r.Binary.Needed, " "), r.Files)
}

var wheelName = regexp.MustCompile(`^probing_mcp-([^-]+)-py3-none-([A-Za-z0-9_.]+)\.whl$`)

// platformBound reads one platform tag: its arch and the newest glibc it
// lets the binary need (nil for linux_<arch>).
func platformBound(tag string) (arch string, max *Version, err error) {
	if rest, ok := strings.CutPrefix(tag, "manylinux2014_"); ok {
		return rest, &Version{2, 17}, nil
	}
	if rest, ok := strings.CutPrefix(tag, "linux_"); ok {
		return rest, nil, nil
	}
	if rest, ok := strings.CutPrefix(tag, "manylinux_"); ok {
		parts := strings.SplitN(rest, "_", 3)
		if len(parts) == 3 {
			maj, e1 := strconv.Atoi(parts[0])
			min, e2 := strconv.Atoi(parts[1])
			if e1 == nil && e2 == nil {
				return parts[2], &Version{maj, min}, nil
			}
		}
	}
	return "", nil, fmt.Errorf("platform tag %q is not manylinux_X_Y_<arch>, manylinux2014_<arch> or linux_<arch>", tag)
}

// Check opens the wheel at path and checks it; an error means it could
// not be read at all.
func Check(path string, opt Options) (Result, error) {
	res := Result{Path: path}
	st, err := os.Stat(path)
	if err != nil {
		return res, err
	}
	res.Bytes = st.Size()
	m := wheelName.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return res, fmt.Errorf("%s: not a probing_mcp-<version>-py3-none-<platform>.whl file name", path)
	}
	res.Version, res.Tags = m[1], strings.Split(m[2], ".")
	bad := func(f string, a ...any) { res.Problems = append(res.Problems, fmt.Sprintf(f, a...)) }
	if opt.Version != "" && res.Version != opt.Version {
		bad("the file name says version %s, VERSION says %s", res.Version, opt.Version)
	}
	if opt.MaxBytes > 0 && res.Bytes > opt.MaxBytes {
		bad("the wheel weighs %.1f MB, over the %.1f MB bound", float64(res.Bytes)/1e6, float64(opt.MaxBytes)/1e6)
	}
	for _, tag := range res.Tags {
		arch, max, err := platformBound(tag)
		if err != nil {
			bad("%v", err)
			continue
		}
		if res.Arch != "" && arch != res.Arch {
			bad("the platform tags name two machines, %s and %s", res.Arch, arch)
		}
		res.Arch = arch
		// Several tags (the PEP 600 name and its alias): the binary must
		// honour the strictest.
		if max != nil && (res.MaxGLIBC == nil || max.Less(*res.MaxGLIBC)) {
			res.MaxGLIBC = max
		}
	}
	z, err := zip.OpenReader(path)
	if err != nil {
		return res, fmt.Errorf("%s: not a zip file: %w", path, err)
	}
	defer z.Close()
	byName := map[string]*zip.File{}
	for _, f := range z.File {
		byName[f.Name] = f
	}
	distInfo := fmt.Sprintf("probing_mcp-%s.dist-info/", res.Version)
	read := func(name string) []byte {
		f := byName[name]
		if f == nil {
			bad("%s is missing", name)
			return nil
		}
		rc, err := f.Open()
		if err != nil {
			bad("%s: %v", name, err)
			return nil
		}
		defer rc.Close()
		// Bounded by the wheel's own size bound, and by 256 MB without one.
		b, err := io.ReadAll(io.LimitReader(rc, 256<<20))
		if err != nil {
			bad("%s: %v", name, err)
		}
		return b
	}
	checkWheelMeta(read(distInfo+"WHEEL"), res.Tags, bad)
	checkMetadata(read(distInfo+"METADATA"), res.Version, bad)
	if ep := read(distInfo + "entry_points.txt"); ep != nil && !bytes.Contains(ep, []byte("probing-mcp = probing_mcp.__main__:main")) {
		bad("entry_points.txt has no probing-mcp console script")
	}
	res.Files = checkRecord(read(distInfo+"RECORD"), distInfo+"RECORD", z.File, read, bad)
	if f := byName[BinaryPath]; f != nil && f.Mode()&0o111 == 0 {
		bad("%s is not executable in the wheel (mode %v): pip would install it so", BinaryPath, f.Mode())
	}
	if bin := read(BinaryPath); bin != nil {
		b, err := Inspect(bytes.NewReader(bin))
		if err != nil {
			bad("%s: %v", BinaryPath, err)
		} else {
			res.Binary = b
			res.Problems = append(res.Problems, b.Problems(res.Arch, res.MaxGLIBC)...)
		}
	}
	for _, want := range []string{"probing_mcp/__init__.py", "probing_mcp/__main__.py", "probing_mcp/_version.py", "probing_mcp_agent/__init__.py", "probing_mcp_agent/_hook.py"} {
		if byName[want] == nil {
			bad("%s is missing", want)
		}
	}
	return res, nil
}

func checkWheelMeta(b []byte, tags []string, bad func(string, ...any)) {
	if b == nil {
		return
	}
	want := map[string]bool{}
	for _, t := range tags {
		want["py3-none-"+t] = true
	}
	got := map[string]bool{}
	purelib := ""
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Tag":
			got[strings.TrimSpace(v)] = true
		case "Root-Is-Purelib":
			purelib = strings.TrimSpace(v)
		}
	}
	for t := range want {
		if !got[t] {
			bad("WHEEL lacks the tag %s that the file name claims", t)
		}
	}
	for t := range got {
		if !want[t] {
			bad("WHEEL claims the tag %s that the file name lacks", t)
		}
	}
	if purelib != "false" {
		bad("WHEEL says Root-Is-Purelib: %q; a wheel with a binary is platlib (false)", purelib)
	}
}

func checkMetadata(b []byte, version string, bad func(string, ...any)) {
	if b == nil {
		return
	}
	head, _, _ := strings.Cut(string(b), "\n\n")
	fields := map[string]string{}
	for _, line := range strings.Split(head, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if fields["Name"] != "probing-mcp" {
		bad("METADATA names %q, not probing-mcp", fields["Name"])
	}
	if fields["Version"] != version {
		bad("METADATA says version %q, the file name %s", fields["Version"], version)
	}
	if fields["Requires-Python"] != ">=3.9" {
		bad("METADATA's Requires-Python is %q; the agent needs >=3.9", fields["Requires-Python"])
	}
}

// checkRecord verifies that RECORD lists every file of the wheel with its
// sha256 and size, and nothing else; it returns how many it verified.
func checkRecord(rec []byte, recName string, files []*zip.File, read func(string) []byte, bad func(string, ...any)) int {
	if rec == nil {
		return 0
	}
	listed := map[string][2]string{}
	sc := bufio.NewScanner(bytes.NewReader(rec))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		// Names here have no commas (the wheel is ours); a quoted CSV
		// field would show up as a missing file.
		parts := strings.Split(line, ",")
		if len(parts) != 3 {
			bad("RECORD line %q is not path,hash,size", clip(line))
			continue
		}
		listed[parts[0]] = [2]string{parts[1], parts[2]}
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	sort.Strings(names)
	n := 0
	for _, name := range names {
		want, ok := listed[name]
		delete(listed, name)
		if name == recName {
			continue
		}
		if !ok {
			bad("%s is in the wheel but not in RECORD", name)
			continue
		}
		data := read(name)
		sum := sha256.Sum256(data)
		got := "sha256=" + base64.RawURLEncoding.EncodeToString(sum[:])
		if want[0] != got || want[1] != strconv.Itoa(len(data)) {
			bad("%s does not match RECORD (%s,%s; the file is %s,%d)", name, want[0], want[1], got, len(data))
			continue
		}
		n++
	}
	for name := range listed {
		bad("RECORD lists %s, which the wheel lacks", clip(name))
	}
	return n
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}
