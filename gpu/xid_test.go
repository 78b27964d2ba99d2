package gpu

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseXidLog(t *testing.T) {
	f, err := os.Open("testdata/dmesg-xid.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, dropped, err := ParseXidLog(f)
	if err != nil || dropped != 0 || len(evs) != 5 {
		t.Fatalf("%v %d %+v", err, dropped, evs)
	}
	e := evs[0]
	if e.Xid != 79 || e.PCIBusID != "0000:3b:00" || e.PID != 1234 || e.Process != "python" || e.Message != "GPU has fallen off the bus." ||
		e.Meaning != "GPU has fallen off the bus" || e.Boot != 1234567890*time.Microsecond || e.Source != "kmsg" || e.GPU != -1 {
		t.Fatalf("%+v", e)
	}
	if e := evs[1]; e.Xid != 13 || e.PID != 0 || e.Process != "" || !strings.HasPrefix(e.Message, "Graphics SM Warp Exception") {
		t.Fatalf("unknown pid: %+v", e)
	}
	if e := evs[2]; e.Xid != 48 || e.PCIBusID != "0000:af:00" || !strings.HasPrefix(e.Message, "An uncorrectable") || !strings.Contains(e.Meaning, "double-bit") {
		t.Fatalf("old format: %+v", e)
	}
	if e := evs[3]; e.Xid != 94 || e.Process != "pt_main_thread" || e.Message != "Ch 00000008" {
		t.Fatalf("%+v", e)
	}
	if e := evs[4]; e.Xid != 63 || e.PID != 0 || !strings.HasPrefix(e.Message, "Row Remapper") {
		t.Fatalf("%+v", e)
	}
	if XidMeaning(31) == "Xid 31" || XidMeaning(12345) != "Xid 12345" {
		t.Fatal("meanings")
	}
}

func TestParseXidLogBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("NVRM: Xid (PCI:0000:3b:00): 79, " + strings.Repeat("x", 3*MaxLogLine) + "\n")
	for i := 0; i < MaxXidEvents+10; i++ {
		b.WriteString("NVRM: Xid (PCI:0000:3b:00): 31, pid=7, name=" + strings.Repeat("n", 200) + ", " + strings.Repeat("m\x1b", 400) + "\n")
	}
	evs, dropped, err := ParseXidLog(strings.NewReader(b.String()))
	if err != nil || len(evs) != MaxXidEvents || dropped != 10 {
		t.Fatalf("%v %d %d", err, len(evs), dropped)
	}
	if e := evs[0]; e.Xid != 31 || len(e.Process) > 64+3 || len(e.Message) > MaxXidMessage+3 || strings.ContainsRune(e.Message, 0x1b) {
		t.Fatalf("%+v", e)
	}
}

func TestReadKmsgFile(t *testing.T) {
	res := ReadKmsg("testdata/kmsg-xid.txt")
	if res.Note != "" || len(res.Events) != 2 || res.Events[0].Xid != 79 || res.Events[0].Boot != 1234567890*time.Microsecond || res.Events[1].Xid != 43 {
		t.Fatalf("%+v", res)
	}
}

func TestReadKmsgUnreadable(t *testing.T) {
	res := ReadKmsg(filepath.Join(t.TempDir(), "kmsg"))
	if len(res.Events) != 0 || !strings.Contains(res.Note, "does not exist") {
		t.Fatalf("%+v", res)
	}
	if os.Geteuid() != 0 {
		p := filepath.Join(t.TempDir(), "kmsg")
		if err := os.WriteFile(p, nil, 0); err != nil {
			t.Fatal(err)
		}
		if res := ReadKmsg(p); !strings.Contains(res.Note, "permission denied") || !strings.Contains(res.Note, "CAP_SYSLOG") {
			t.Fatalf("%+v", res)
		}
	}
}

// A log with a writer that never writes (a FIFO held open) must not block:
// only what is buffered is read.
func TestReadKmsgNeverBlocks(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kmsg")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skip(err)
	}
	w, err := os.OpenFile(p, os.O_RDWR, 0) // O_RDWR: opening does not wait for a reader
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"); err != nil {
		t.Fatal(err)
	}
	done := make(chan KmsgResult, 1)
	go func() { done <- ReadKmsg(p) }()
	select {
	case res := <-done:
		if len(res.Events) != 1 || res.Note != "" {
			t.Fatalf("%+v", res)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a timing margin
		t.Fatal("ReadKmsg blocked on a FIFO with no more data")
	}
}

// The real kernel log of this machine: readable or not, ReadKmsg returns.
func TestReadKmsgHere(t *testing.T) {
	if _, err := os.Stat("/dev/kmsg"); err != nil {
		t.Skip("no /dev/kmsg")
	}
	done := make(chan KmsgResult, 1)
	go func() { done <- ReadKmsg("") }()
	var res KmsgResult
	select {
	case res = <-done:
	case <-time.After(60 * time.Second): // a hang guard
		t.Fatal("ReadKmsg blocked on /dev/kmsg")
	}
	t.Logf("/dev/kmsg: %d Xid events, note %q", len(res.Events), res.Note)
}

func FuzzParseXidLine(f *testing.F) {
	for _, s := range []string{
		"[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
		"6,1001,1234567890,-;NVRM: Xid (PCI:0000:3b:00): 43, pid=1234, name=python, Ch 00000010",
		"NVRM: Xid (0000:af:00): 48, An uncorrectable double bit error",
		"NVRM: Xid (PCI:0000:3b:00): 13, pid='<unknown>', name=<unknown>, x",
		"4,1,99999999999999999999,-;NVRM: Xid (PCI:0:0:0): 1,",
		"[1e300] NVRM: Xid (PCI:0000:3b:00): 1, pid=-5, name=\xff\xfe, \x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		ev, ok := ParseXidLine(line)
		if !ok {
			return
		}
		if !strings.Contains(line, "NVRM: Xid (") || len(line) > MaxLogLine {
			t.Fatalf("accepted %q", line)
		}
		if len(ev.Message) > MaxXidMessage+len("…") || len(ev.Process) > 64+len("…") || len(ev.PCIBusID) > 20 || ev.PID < 0 || ev.Boot < 0 || ev.Xid > 999999 {
			t.Fatalf("unbounded %+v", ev)
		}
		if ev.Meaning == "" || ev.Kind != "xid" {
			t.Fatalf("%+v", ev)
		}
	})
}

// TestXidSpoofsAreNotXids: issue 23. The driver's tag anywhere but at the
// start of the kernel's message is text a process chose (a library named
// like an Xid record in the kernel's segfault line), and a record a process
// wrote to /dev/kmsg (a facility other than the kernel's) is not the
// driver's.
func TestXidSpoofsAreNotXids(t *testing.T) {
	for _, line := range []string{
		"6,2001,1234567890,-;x[4242]: segfault at 0 ip 00007f sp 00007ffd error 4 in x NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.so[7f+1000]",
		"[ 99.1] python[77]: segfault at 8 ip 1 sp 2 error 6 in libNVRM: Xid (PCI:0000:3b:00): 48, x.so",
		"14,2002,1234567890,-;NVRM: Xid (PCI:0000:3b:00): 79, written by a process to /dev/kmsg",
		"kernel: user text NVRM: Xid (PCI:0000:3b:00): 79, x",
	} {
		if ev, ok := ParseXidLine(line); ok {
			t.Errorf("accepted %q as %+v", line, ev)
		}
	}
	if _, ok := ParseXidLine("4,2003,1234567890,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."); !ok {
		t.Error("the kernel's own record refused")
	}
}
