package gpu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// XidEvent is one GPU error: an NVML event (Source "nvml") or an NVRM
// line of the kernel log (Source "kmsg").
type XidEvent struct {
	// Kind is "xid", "double_bit_ecc", "single_bit_ecc" or "gpu_lost" (the
	// event wait itself said a GPU is lost, not which).
	Kind string `json:"kind"`
	Xid  uint64 `json:"xid,omitempty"`
	// Meaning is the Xid (or ECC event) in words (XidMeaning).
	Meaning string `json:"meaning"`
	// GPU is the device index (-1 when the log names only the bus).
	GPU      int    `json:"gpu"`
	UUID     string `json:"uuid,omitempty"`
	PCIBusID string `json:"pci_bus_id,omitempty"`
	PID      int    `json:"pid,omitempty"`
	Process  string `json:"process,omitempty"`
	// Message is the rest of the kernel's line, cut to MaxXidMessage.
	Message string `json:"message,omitempty"`
	Source  string `json:"source"`
	// Time: when NVML delivered it; for kmsg, Boot is the kernel's
	// timestamp since boot and Time is zero.
	Time time.Time     `json:"time,omitzero"`
	Boot time.Duration `json:"since_boot_ns,omitempty"`
}

// xidMeanings: the Xids a hang diagnosis acts on (NVIDIA's Xid catalogue).
var xidMeanings = map[uint64]string{
	13:  "graphics engine exception: a kernel hit an illegal instruction or address (application bug, or the GPU)",
	31:  "GPU memory page fault: a kernel accessed an invalid address (usually an application bug)",
	43:  "GPU stopped processing: a user application faulted and its context was killed",
	45:  "preemptive cleanup after an earlier error (the channel was torn down)",
	48:  "double-bit ECC error: uncorrectable GPU memory error",
	61:  "internal micro-controller breakpoint (driver or firmware fault)",
	62:  "internal micro-controller halt (driver or firmware fault)",
	63:  "ECC page retirement or row remapping recorded (a reset applies it)",
	64:  "ECC page retirement or row remapping failed",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error: the application that hit it must restart",
	95:  "uncontained ECC error: every application on the GPU is affected; the GPU needs a reset",
	119: "GSP RPC timeout (the GPU's firmware stopped answering)",
	120: "GSP error",
}

// XidMeaning is an Xid code in words; unknown ones are "Xid N".
func XidMeaning(xid uint64) string {
	if m, ok := xidMeanings[xid]; ok {
		return m
	}
	return fmt.Sprintf("Xid %d", xid)
}

// Bounds on untrusted log text.
const (
	MaxLogLine    = 8192 // a kmsg record is at most ~1 KiB; longer lines are skipped
	MaxXidMessage = 200
	MaxXidEvents  = 256 // ReadKmsg keeps the newest this many
	maxKmsgRead   = 1 << 20
)

// ParseXidLine reads one kernel log line: a /dev/kmsg record
// ("4,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=…, name=…, msg"),
// a dmesg line ("[ 5.678901] NVRM: Xid …") or the bare message. Only the
// driver's own record counts: the message starts with its tag, and a kmsg
// record is of the kernel's facility. It reports false for any other line,
// and never fails otherwise.
func ParseXidLine(line string) (XidEvent, bool) {
	if len(line) > MaxLogLine {
		return XidEvent{}, false
	}
	var boot time.Duration
	rest := line
	if semi := strings.IndexByte(rest, ';'); semi > 0 && isKmsgPrefix(rest[:semi]) {
		f := strings.Split(rest[:semi], ",")
		if prio, err := strconv.ParseUint(f[0], 10, 16); err != nil || prio>>3 != 0 {
			// Not the kernel's facility: a process wrote it to /dev/kmsg.
			return XidEvent{}, false
		}
		if us, err := strconv.ParseUint(f[2], 10, 63); err == nil && us < uint64(1<<62)/1000 {
			boot = time.Duration(us) * time.Microsecond
		}
		rest = rest[semi+1:]
	} else if strings.HasPrefix(strings.TrimLeft(rest, " "), "[") {
		t := strings.TrimLeft(rest, " ")[1:]
		if end := strings.IndexByte(t, ']'); end > 0 && end < 32 {
			if sec, err := strconv.ParseFloat(strings.TrimSpace(t[:end]), 64); err == nil && sec >= 0 && sec < 1e9 {
				boot = time.Duration(sec * float64(time.Second))
			}
			rest = t[end+1:]
		}
	}
	// The driver's own record starts with its tag. Anywhere else in a line
	// it is text a process chose: a library named "x NVRM: Xid (...): 79"
	// that segfaults puts it in the kernel's segfault line.
	rest = strings.TrimLeft(rest, " ")
	rest, ok := strings.CutPrefix(rest, "NVRM: Xid (")
	if !ok {
		return XidEvent{}, false
	}
	end := strings.IndexByte(rest, ')')
	if end < 0 || end > 40 {
		return XidEvent{}, false
	}
	bus := strings.TrimPrefix(rest[:end], "PCI:")
	if !validBus(bus) {
		return XidEvent{}, false
	}
	rest = strings.TrimLeft(rest[end+1:], " ")
	rest, ok = strings.CutPrefix(rest, ":")
	if !ok {
		return XidEvent{}, false
	}
	rest = strings.TrimLeft(rest, " ")
	j := 0
	for j < len(rest) && j < 7 && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	if j == 0 || j == 7 {
		return XidEvent{}, false
	}
	xid, _ := strconv.ParseUint(rest[:j], 10, 32)
	ev := XidEvent{Kind: "xid", Xid: xid, Meaning: XidMeaning(xid), GPU: -1, PCIBusID: bus, Source: "kmsg", Boot: boot}
	rest = strings.TrimPrefix(rest[j:], ",")
	// Newer drivers put "pid=…, name=…," before the message; older ones do not.
	for range 2 {
		rest = strings.TrimLeft(rest, " ")
		k, v, ok := cutField(rest)
		if !ok {
			break
		}
		switch k {
		case "pid":
			if p, err := strconv.Atoi(strings.Trim(v, "'")); err == nil && p > 0 {
				ev.PID = p
			}
		case "name":
			if v != "<unknown>" {
				ev.Process = clean(v, 64)
			}
		}
		rest = rest[len(k)+1+len(v):]
		rest = strings.TrimPrefix(rest, ",")
	}
	ev.Message = clean(strings.TrimSpace(rest), MaxXidMessage)
	return ev, true
}

// cutField reads "pid=123" or "name=python" up to the next comma.
func cutField(s string) (k, v string, ok bool) {
	for _, key := range []string{"pid", "name"} {
		if strings.HasPrefix(s, key+"=") {
			v = s[len(key)+1:]
			if c := strings.IndexByte(v, ','); c >= 0 {
				v = v[:c]
			} else {
				return "", "", false // the last field is the message, never a pid/name
			}
			return key, v, true
		}
	}
	return "", "", false
}

func isKmsgPrefix(s string) bool {
	f := strings.Split(s, ",")
	if len(f) < 4 || len(s) > 64 {
		return false
	}
	for _, x := range f[:3] {
		if _, err := strconv.ParseUint(x, 10, 64); err != nil {
			return false
		}
	}
	return true
}

// validBus: "0000:3b:00" or "0000:3b:00.0", hex digits, ':' and '.'.
func validBus(s string) bool {
	if len(s) < 4 || len(s) > 20 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == ':' || c == '.') {
			return false
		}
	}
	return true
}

// clean keeps printable text, cut to max bytes on a rune boundary.
func clean(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return -1
		}
		return r
	}, s)
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// ParseXidLog reads kernel log text (dmesg output, a saved kmsg) and
// returns its Xid lines, the newest MaxXidEvents, with how many older
// ones were dropped. Lines longer than MaxLogLine are skipped.
func ParseXidLog(r io.Reader) (events []XidEvent, dropped int, err error) {
	br := bufio.NewReaderSize(r, MaxLogLine)
	skipping := false // inside an overlong line
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			skipping = true
			continue
		case skipping:
			skipping = false // the overlong line's tail
		case len(line) > 0:
			if ev, ok := ParseXidLine(string(bytes.TrimRight(line, "\r\n"))); ok {
				events, dropped = keep(events, dropped, ev)
			}
		}
		if err == io.EOF {
			return events, dropped, nil
		}
		if err != nil {
			return events, dropped, err
		}
	}
}

func keep(events []XidEvent, dropped int, ev XidEvent) ([]XidEvent, int) {
	if len(events) == MaxXidEvents {
		copy(events, events[1:])
		events = events[:len(events)-1]
		dropped++
	}
	return append(events, ev), dropped
}

// KmsgResult is what the kernel log backfill found.
type KmsgResult struct {
	Events  []XidEvent `json:"events,omitempty"`
	Dropped int        `json:"dropped,omitempty"`
	// Note says why the log could not be read (or was read only in part);
	// it is never an error that stops anything.
	Note string `json:"note,omitempty"`
}

// ReadKmsg reads what the kernel log holds now from path ("/dev/kmsg"
// when empty), without waiting for more: the file is opened non-blocking
// and reading stops at EAGAIN, EOF or maxKmsgRead bytes. NVML reports no
// event older than its registration, so this is how a daemon learns the
// Xids that came before it.
func ReadKmsg(path string) KmsgResult {
	if path == "" {
		path = "/dev/kmsg"
	}
	// Raw syscalls, not os.File: Go parks an O_NONBLOCK file that epoll
	// accepts (/dev/kmsg, a FIFO) in its poller, and Read would wait there
	// for the next record instead of returning EAGAIN.
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrPermission):
			return KmsgResult{Note: path + ": permission denied (reading the kernel log needs CAP_SYSLOG or kernel.dmesg_restrict=0): Xids before the watcher started are not known"}
		case errors.Is(err, fs.ErrNotExist):
			return KmsgResult{Note: path + ": does not exist (no kernel log in this container): Xids before the watcher started are not known"}
		}
		return KmsgResult{Note: fmt.Sprintf("%s: %v: Xids before the watcher started are not known", path, err)}
	}
	defer syscall.Close(fd)
	var res KmsgResult
	// /dev/kmsg gives one record per read and refuses a buffer smaller
	// than the record (EINVAL); a plain file gives chunks. Both are split
	// into lines here.
	buf := make([]byte, MaxLogLine)
	var pending []byte
	total := 0
	for total < maxKmsgRead {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		n = max(n, 0)
		if n == 0 && err == nil {
			err = io.EOF
		}
		total += n
		pending = append(pending, buf[:n]...)
		for {
			nl := bytes.IndexByte(pending, '\n')
			if nl < 0 {
				break
			}
			line := pending[:nl]
			if len(line) > 0 && line[0] != ' ' { // ' KEY=value' continuation lines carry no message
				if ev, ok := ParseXidLine(string(line)); ok {
					res.Events, res.Dropped = keep(res.Events, res.Dropped, ev)
				}
			}
			pending = pending[nl+1:]
		}
		if len(pending) > MaxLogLine {
			pending = pending[:0] // an overlong line: drop it
		}
		switch {
		case err == nil:
			continue
		case errors.Is(err, syscall.EPIPE):
			continue // records were overwritten while reading: the next read resumes at the oldest kept
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, io.EOF):
		case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
			res.Note = path + ": permission denied while reading (needs CAP_SYSLOG or kernel.dmesg_restrict=0)"
		default:
			res.Note = fmt.Sprintf("%s: read stopped: %v", path, err)
		}
		break
	}
	if len(pending) > 0 {
		if ev, ok := ParseXidLine(string(pending)); ok {
			res.Events, res.Dropped = keep(res.Events, res.Dropped, ev)
		}
	}
	if total >= maxKmsgRead && res.Note == "" {
		res.Note = fmt.Sprintf("%s: read stopped after %d bytes", path, maxKmsgRead)
	}
	return res
}
