package gpu

import (
	"cmp"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func TestStateNoDriver(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}
	n := OpenLib(lib) // any call past Init would panic: the mock has no other function
	if st := n.Status(); st.State != StateNoDriver || !contains(st.Reason, "kernel driver is not loaded") {
		t.Fatalf("%+v", st)
	}
	if _, err := n.Sample(context.Background()); !errors.Is(err, ErrNotReady) || !contains(err.Error(), "no_driver") {
		t.Fatal(err)
	}
	if _, err := n.Watch(context.Background(), WatchOptions{}); !errors.Is(err, ErrNotReady) {
		t.Fatal(err)
	}
	if len(lib.DeviceGetCountCalls()) != 0 || n.Close() != nil {
		t.Fatal("called past a failed Init")
	}
}

func TestStateNoDevice(t *testing.T) {
	srv := a100(spinningA100)
	srv.Devices = nil
	st := OpenLib(srv).Status()
	if st.State != StateNoDevice || !contains(st.Reason, "no GPU") {
		t.Fatalf("%+v", st)
	}
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_NO_PERMISSION }}
	if st := OpenLib(lib).Status(); st.State != StateError || !contains(st.Reason, "permission") {
		t.Fatalf("%+v", st)
	}
	panicky := &mock.Interface{InitFunc: func() nvml.Return { return nvml.SUCCESS }} // no DeviceGetCount
	if st := OpenLib(panicky).Status(); st.State != StateError || !contains(st.Reason, "panicked") {
		t.Fatalf("%+v", st)
	}
}

// This machine has no NVIDIA library: the real path must say so.
func TestStateNoLibraryHere(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver")
	}
	n := Open("")
	st := n.Status()
	if st.State != StateNoLibrary || !contains(st.Reason, DefaultLibrary) {
		t.Fatalf("%+v", st)
	}
	if n.Close() != nil {
		t.Fatal("close")
	}
}

// helperEnv runs this test binary as a small program: it opens NVML and
// prints the status as JSON.
const helperEnv = "GPU_TEST_HELPER_LIB"

func TestHelperProcess(t *testing.T) {
	lib, ok := os.LookupEnv(helperEnv)
	if !ok {
		t.Skip("helper")
	}
	n := Open(lib)
	st := n.Status()
	if st.State == StateOK {
		snaps, err := n.Sample(context.Background())
		st.Reason = fmt.Sprintf("sampled %d: %v", len(snaps), err)
	}
	_ = n.Close()
	b, _ := json.Marshal(st)
	fmt.Printf("STATUS %s\n", b)
	os.Exit(0)
}

func runHelper(t *testing.T, lib string) Status {
	t.Helper()
	argv := []string{os.Args[0], "-test.run=^TestHelperProcess$"}
	// GPU_TEST_EMULATOR runs the helper under an emulator where the kernel
	// has no binfmt entry for this binary's architecture (the arm64
	// wheel's check: "qemu-aarch64 -L /usr/aarch64-linux-gnu").
	if emu := strings.Fields(os.Getenv("GPU_TEST_EMULATOR")); len(emu) > 0 {
		argv = append(emu, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "LD_BIND_NOW=1", helperEnv+"="+lib)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper under LD_BIND_NOW=1 (lib %q): %v\n%s", lib, err, out)
	}
	_, js, ok := strings.Cut(string(out), "STATUS ")
	if !ok {
		t.Fatalf("no status:\n%s", out)
	}
	var st Status
	if err := json.Unmarshal([]byte(strings.TrimSpace(strings.SplitN(js, "\n", 2)[0])), &st); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return st
}

// Under LD_BIND_NOW=1 a go-nvml binary without the library dies at
// start (symbol lookup error, exit 127); this package's stubs keep it up.
func TestBindNowWithoutLibrary(t *testing.T) {
	if !stubsBuilt() {
		t.Skip("the stubs are linux/amd64 and linux/arm64 only")
	}
	st := runHelper(t, filepath.Join(t.TempDir(), "libnvidia-ml.so.1"))
	if st.State != StateNoLibrary || !contains(st.Reason, "cannot be loaded") {
		t.Fatalf("%+v", st)
	}
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		if st := runHelper(t, ""); st.State != StateNoLibrary {
			t.Fatalf("default library: %+v", st)
		}
	}
}

// A fake libnvidia-ml (built here with the C compiler) proves the stubs
// forward to the library under LD_BIND_NOW=1: its Init says the driver
// is not loaded, or it counts no GPU, or one that is lost.
func TestBindNowFakeLibrary(t *testing.T) {
	if !stubsBuilt() {
		t.Skip("the stubs are linux/amd64 and linux/arm64 only")
	}
	// CC names a compiler for this binary's architecture when it runs
	// under emulation (the arm64 wheel's check: a zig cc wrapper).
	cc, err := exec.LookPath(cmp.Or(os.Getenv("CC"), "gcc"))
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			t.Skip("no C compiler")
		}
	}
	build := func(initRet, count int) string {
		dir := t.TempDir()
		src := filepath.Join(dir, "fake.c")
		code := fmt.Sprintf(`
#include <string.h>
int nvmlInit_v2(void) { return %d; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return "fake"; }
int nvmlSystemGetDriverVersion(char *v, unsigned n) { strncpy(v, "999.1", n); return 0; }
int nvmlDeviceGetCount_v2(unsigned *c) { *c = %d; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **d) { *d = (void *)0x1; return 0; }
int nvmlDeviceGetName(void *d, char *s, unsigned n) { strncpy(s, "Fake GPU", n); return 0; }
int nvmlDeviceGetUUID(void *d, char *s, unsigned n) { return 15; /* GPU_IS_LOST */ }
`, initRet, count)
		if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
		lib := filepath.Join(dir, "libnvidia-ml.so.1")
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return lib
	}
	if st := runHelper(t, build(int(nvml.ERROR_DRIVER_NOT_LOADED), 0)); st.State != StateNoDriver {
		t.Fatalf("no driver: %+v", st)
	}
	if st := runHelper(t, build(0, 0)); st.State != StateNoDevice || st.Driver != "999.1" {
		t.Fatalf("no device: %+v", st)
	}
	// One GPU that answers its name and is lost at its UUID: every other
	// function is absent from the fake and answers FUNCTION_NOT_FOUND.
	if st := runHelper(t, build(0, 1)); st.State != StateOK || st.Reason != "sampled 1: <nil>" {
		t.Fatalf("one GPU: %+v", st)
	}
}

// Every NVML symbol go-nvml references must be defined by this package:
// one left undefined kills the process under LD_BIND_NOW=1. This fails
// after a go-nvml upgrade until `go generate ./gpu` is run.
func TestNoUndefinedNVMLSymbols(t *testing.T) {
	if !stubsBuilt() {
		t.Skip("the stubs are linux/amd64 and linux/arm64 only")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var undef []string
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "nvml") && s.Section == elf.SHN_UNDEF {
			undef = append(undef, s.Name)
		}
	}
	if len(undef) > 0 {
		t.Fatalf("%d NVML symbols undefined (run go generate ./gpu): %v", len(undef), undef[:min(len(undef), 10)])
	}
	if stubCount() < 400 {
		t.Fatalf("only %d stubs", stubCount())
	}
}

func stubsBuilt() bool {
	return runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64")
}
