package tools

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
)

// Where the file tools may read by default, and what no root may be.
//
// A client may spawn the server anywhere, / included, so the working
// directory alone says nothing about what the user meant to expose. The
// default roots are the places dumps are written: the data dir, torch's
// Flight Recorder dump location, and the working directory only when it is
// a project directory. No root, default or configured, may be the file
// system's root, a system directory, the home directory, or anything that
// contains one, nor lie inside the kernel's or the system's own trees.

// systemDirs may not be a root nor lie below one.
var systemDirs = []string{"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
	"/proc", "/root", "/run", "/sbin", "/snap", "/sys", "/usr", "/var"}

// sealedDirs may hold no root at all: kernel views (/proc/self/environ),
// devices, configuration and secrets (/etc/shadow, /run/secrets). The data
// dir under /dev/shm is the exception.
var sealedDirs = []string{"/proc", "/sys", "/dev", "/etc", "/boot", "/run"}

// sharedTempDirs are writable by everyone: never a project directory, and
// only torch's dump files by name when a dump prefix points there.
var sharedTempDirs = []string{"/tmp", "/var/tmp", "/dev/shm"}

// projectMarkers make a directory a project directory, as git or pip
// would recognise one.
var projectMarkers = []string{".git", ".hg", ".svn", "pyproject.toml", "setup.py", "setup.cfg",
	"requirements.txt", "environment.yml", "Pipfile", "go.mod", "Cargo.toml", "package.json", "CMakeLists.txt"}

// frPrefixVars name torch's per-rank dump file prefix, newest first.
var frPrefixVars = []string{"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCHCOMM_FR_DUMP_TEMP_FILE"}

// torchLegacyDumpPrefix is the dump prefix torch documents and older
// releases use; newer ones write under the cache directory.
const torchLegacyDumpPrefix = "/tmp/nccl_trace_rank_"

// NewFilePolicy builds the roots. PROBING_ALLOWED_FILE_DIRS (colon-
// separated) replaces the defaults; an entry that is or contains a system
// directory is an error, since it would defeat the policy. Otherwise the
// roots are the data dir, the Flight Recorder dump location and a project
// working directory, each with the reason it is in. Roots that do not exist
// yet are kept, so that a data dir created later still counts.
func NewFilePolicy(getenv func(string) string, workDir, dataDir string) (FilePolicy, error) {
	home := cleanAbs(getenv("HOME"))
	if home == "" { // a client may spawn the server with a bare environment
		if u, err := user.Current(); err == nil {
			home = cleanAbs(u.HomeDir)
		}
	}
	if v := getenv("PROBING_ALLOWED_FILE_DIRS"); strings.TrimSpace(v) != "" {
		return explicitPolicy(v, home)
	}
	p := FilePolicy{Owners: sharedOwners(getenv)}
	add := func(path string, prefix bool, why string) {
		r := newFileRoot(path, prefix, why)
		r.Shared = prefix && isSharedTemp(filepath.Dir(path))
		if reason := protected(r.Path, home); reason != "" {
			r.Why = fmt.Sprintf("%s, but it %s", why, reason)
			p.Skipped = append(p.Skipped, r)
			return
		}
		if reason := protected(r.Real, home); reason != "" {
			r.Why = fmt.Sprintf("%s, but it resolves to %s, which %s", why, r.Real, reason)
			p.Skipped = append(p.Skipped, r)
			return
		}
		p.Roots = append(p.Roots, r)
	}

	if d := cleanAbs(dataDir); d != "" {
		why := "the data dir (Probing's default)"
		if getenv("PROBING_DATA_DIR") != "" {
			why = "the data dir (PROBING_DATA_DIR)"
		}
		add(d, false, why)
	}

	fromVar := false
	for _, name := range frPrefixVars {
		v := getenv(name)
		if v == "" {
			continue
		}
		fromVar = true
		if !filepath.IsAbs(v) {
			p.Skipped = append(p.Skipped, FileRoot{Path: v, Why: fmt.Sprintf("%s=%s is relative to the training job's directory, which is unknown here", name, v)})
			continue
		}
		// The dumps are <prefix><rank>: a prefix ending in / names a
		// directory of files named by rank alone.
		clean := filepath.Clean(v)
		dir, base := filepath.Dir(clean), filepath.Base(clean)
		if strings.HasSuffix(v, "/") {
			dir, base = clean, ""
		}
		switch {
		case !isSharedTemp(dir):
			add(dir, false, fmt.Sprintf("the Flight Recorder dump directory of %s=%s", name, v))
		case base == "":
			p.Skipped = append(p.Skipped, FileRoot{Path: dir, Real: dir, Why: fmt.Sprintf(
				"%s=%s names no file prefix in the shared %s, which would open all of it; set PROBING_ALLOWED_FILE_DIRS", name, v, dir)})
		default:
			add(filepath.Join(dir, base), true, fmt.Sprintf("the Flight Recorder dump files %s names, by name only (%s is shared)", name, dir))
		}
	}
	if !fromVar {
		// Newer torch writes $XDG_CACHE_HOME/torch/... or ~/.cache/torch/...;
		// the documented default, still used by older releases, is in /tmp,
		// which holds other programs' secrets (Kerberos tickets, say), so
		// only the dump files themselves are allowed there.
		cache := cleanAbs(getenv("XDG_CACHE_HOME"))
		if cache == "" && home != "" {
			cache = filepath.Join(home, ".cache")
		}
		if cache != "" {
			add(filepath.Join(cache, "torch"), false, "torch's default Flight Recorder dump directory (newer releases)")
		}
		add(torchLegacyDumpPrefix, true, "torch's documented default Flight Recorder dump files (older releases), by name only (/tmp is shared)")
	}

	if wd := cleanAbs(workDir); wd != "" {
		if why, ok := projectDir(wd, home); ok {
			add(wd, false, why)
		} else {
			p.Skipped = append(p.Skipped, FileRoot{Path: wd, Real: wd, Why: why})
		}
	}
	return p, nil
}

func explicitPolicy(v, home string) (FilePolicy, error) {
	p := FilePolicy{FromEnv: true}
	for _, entry := range strings.Split(v, ":") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		abs, err := filepath.Abs(entry)
		if err != nil {
			return FilePolicy{}, fmt.Errorf("PROBING_ALLOWED_FILE_DIRS entry %q: %v", entry, err)
		}
		r := newFileRoot(abs, false, "PROBING_ALLOWED_FILE_DIRS")
		reason := protected(r.Path, home)
		if reason == "" && r.Real != r.Path {
			if reason = protected(r.Real, home); reason != "" {
				reason = "resolves to " + r.Real + ", which " + reason
			}
		}
		if reason != "" {
			return FilePolicy{}, fmt.Errorf("PROBING_ALLOWED_FILE_DIRS entry %q %s, so the file tools could read system files or secrets: "+
				"name the directories that hold the dumps instead (e.g. PROBING_ALLOWED_FILE_DIRS=/scratch/job42/fr_dumps)", entry, reason)
		}
		p.Roots = append(p.Roots, r)
	}
	return p, nil
}

// protected says why p may not be a root, or "" when it may.
func protected(p, home string) string {
	if p == "/" {
		return "is the root of the file system"
	}
	for _, d := range sealedDirs {
		if within(p, d) && !within(p, "/dev/shm") {
			if p == d {
				return "is the system directory " + d
			}
			return "is inside the system directory " + d
		}
	}
	for _, d := range systemDirs {
		switch {
		case p == d:
			return "is the system directory " + d
		case within(d, p):
			return "contains the system directory " + d
		}
	}
	if home != "" && home != "/" {
		switch {
		case p == home:
			return "is the home directory"
		case within(home, p):
			return "contains the home directory " + home
		}
	}
	return ""
}

// projectDir says whether the working directory wd is a project directory:
// it, or a directory above it short of the home directory, holds a project
// marker. It returns the reason either way.
func projectDir(wd, home string) (string, bool) {
	if reason := protected(wd, home); reason != "" {
		return fmt.Sprintf("the working directory %s", reason), false
	}
	if isSharedTemp(wd) {
		return "the working directory is a shared temporary directory", false
	}
	for d := wd; ; {
		for _, m := range projectMarkers {
			if _, err := os.Lstat(filepath.Join(d, m)); err == nil {
				if d == wd {
					return "the working directory, a project directory (it holds " + m + ")", true
				}
				return fmt.Sprintf("the working directory, inside the project %s (it holds %s)", d, m), true
			}
		}
		parent := filepath.Dir(d)
		if parent == d || parent == home || isSharedTemp(parent) || protected(parent, home) != "" {
			break
		}
		d = parent
	}
	return fmt.Sprintf("the working directory is not a project directory (no %s in it or above it); "+
		"start the server in the project, or set PROBING_ALLOWED_FILE_DIRS", strings.Join(projectMarkers[:5], ", ")), false
}

func isSharedTemp(dir string) bool {
	for _, d := range sharedTempDirs {
		if dir == d {
			return true
		}
	}
	return false
}

// cleanAbs returns p cleaned when it is absolute, else "".
func cleanAbs(p string) string {
	if p == "" || !filepath.IsAbs(p) {
		return ""
	}
	return filepath.Clean(p)
}
