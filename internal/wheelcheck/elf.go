// Package wheelcheck checks a built probing-mcp wheel against what its
// file name claims: the binary's machine, the highest glibc symbol version
// it needs, the shared libraries it links (only those every manylinux
// system has), its executable bit, the RECORD's hashes and the size. The
// claim is what pip trusts when it installs the wheel on an old cluster
// node, so it is read from the binary, never assumed.
package wheelcheck

import (
	"debug/elf"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Version is a glibc symbol version, GLIBC_2.17 as {2, 17}.
type Version struct{ Major, Minor int }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Less orders versions.
func (v Version) Less(w Version) bool {
	return v.Major < w.Major || (v.Major == w.Major && v.Minor < w.Minor)
}

// parseGLIBC reads "GLIBC_2.17" or "GLIBC_2.2.5" (patch ignored).
func parseGLIBC(s string) (Version, bool) {
	rest, ok := strings.CutPrefix(s, "GLIBC_")
	if !ok {
		return Version{}, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) < 2 {
		return Version{}, false
	}
	maj, err1 := strconv.Atoi(parts[0])
	min, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return Version{}, false
	}
	return Version{maj, min}, true
}

// Binary is what an ELF executable needs from the system it runs on.
type Binary struct {
	Machine string  // "x86_64" or "aarch64" (else elf's name)
	GLIBC   Version // the highest GLIBC_ symbol version it imports
	// GLIBCSymbol is one symbol that needs GLIBC (for the message).
	GLIBCSymbol string
	Needed      []string // DT_NEEDED
	// Unbound are undefined, unversioned, non-weak dynamic symbols: under
	// LD_BIND_NOW (or a -z now link) each one stops the process at start
	// unless some library provides it.
	Unbound []string
}

var machines = map[elf.Machine]string{elf.EM_X86_64: "x86_64", elf.EM_AARCH64: "aarch64"}

// Inspect reads an ELF executable.
func Inspect(r io.ReaderAt) (Binary, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return Binary{}, fmt.Errorf("not an ELF file: %w", err)
	}
	defer f.Close()
	b := Binary{Machine: machines[f.Machine]}
	if b.Machine == "" {
		b.Machine = f.Machine.String()
	}
	if b.Needed, err = f.DynString(elf.DT_NEEDED); err != nil {
		return b, fmt.Errorf("reading DT_NEEDED: %w", err)
	}
	syms, err := f.DynamicSymbols()
	if err != nil && err != elf.ErrNoSymbols {
		return b, fmt.Errorf("reading the dynamic symbols: %w", err)
	}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF || s.Name == "" {
			continue
		}
		if v, ok := parseGLIBC(s.Version); ok {
			if b.GLIBC.Less(v) {
				b.GLIBC, b.GLIBCSymbol = v, s.Name+"@"+s.Version
			}
			continue
		}
		if s.Version == "" && elf.ST_BIND(s.Info) != elf.STB_WEAK {
			b.Unbound = append(b.Unbound, s.Name)
		}
	}
	sort.Strings(b.Unbound)
	return b, nil
}

// manylinuxLibs are the libraries PEP 599's manylinux2014 policy (and so
// every manylinux_2_17 system) provides; anything else must be in the
// wheel or dlopen-ed (libnvidia-ml.so.1 is, as the driver provides it).
var manylinuxLibs = map[string]bool{
	"libgcc_s.so.1": true, "libstdc++.so.6": true, "libm.so.6": true, "libdl.so.2": true,
	"librt.so.1": true, "libc.so.6": true, "libnsl.so.1": true, "libutil.so.1": true,
	"libpthread.so.0": true, "libresolv.so.2": true, "libX11.so.6": true, "libXext.so.6": true,
	"libXrender.so.1": true, "libICE.so.6": true, "libSM.so.6": true, "libGL.so.1": true,
	"libgobject-2.0.so.0": true, "libgthread-2.0.so.0": true, "libglib-2.0.so.0": true,
	"ld-linux-x86-64.so.2": true, "ld-linux-aarch64.so.1": true,
}

// Problems says what keeps b from running on every system of arch with
// glibc max (max nil: a wheel tagged for this machine only, no bound).
func (b Binary) Problems(arch string, max *Version) []string {
	var out []string
	if b.Machine != arch {
		out = append(out, fmt.Sprintf("the binary is for %s, the wheel's tag says %s", b.Machine, arch))
	}
	if max != nil && max.Less(b.GLIBC) {
		out = append(out, fmt.Sprintf("the binary needs glibc %s (%s), above the tag's %s: it would fail to start on older systems the tag admits", b.GLIBC, b.GLIBCSymbol, max))
	}
	for _, lib := range b.Needed {
		if !manylinuxLibs[lib] {
			out = append(out, fmt.Sprintf("the binary links %s, which manylinux systems need not have", lib))
		}
	}
	if len(b.Unbound) > 0 {
		names := b.Unbound
		if len(names) > 5 {
			names = append(names[:5:5], fmt.Sprintf("and %d more", len(b.Unbound)-5))
		}
		out = append(out, fmt.Sprintf("the binary imports %d symbol(s) no library versions (%s): LD_BIND_NOW=1 would stop it at start", len(b.Unbound), strings.Join(names, ", ")))
	}
	return out
}
