// Package gpu reads NVIDIA GPUs through NVML (github.com/NVIDIA/go-nvml):
// per-device snapshots, Xid and ECC events, the kernel log's Xid lines,
// the ranks of the processes on each GPU, and a bounded summary for an LLM.
// It imports nothing of the MCP side.
//
// Nothing here calls NVML unless Init succeeded, and on linux (amd64 and
// arm64) every NVML symbol go-nvml needs is defined by this package (see
// nvmlstub_linux.c), so a binary that imports it starts and answers
// under LD_BIND_NOW=1 on a machine without libnvidia-ml.so.
package gpu

//go:generate go run ./internal/gensyms

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Lib is the part of NVML's library API this package calls. go-nvml's
// nvml.Interface (nvml.New()) and its mock servers (pkg/nvml/mock/dgxa100,
// dgxh100, …) satisfy it.
type Lib interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
	EventSetCreate() (nvml.EventSet, nvml.Return)
}

// Device is the part of nvml.Device this package calls.
type Device interface {
	GetName() (string, nvml.Return)
	GetUUID() (string, nvml.Return)
	GetPciInfo() (nvml.PciInfo, nvml.Return)
	GetUtilizationRates() (nvml.Utilization, nvml.Return)
	GetMemoryInfo() (nvml.Memory, nvml.Return)
	GetPowerUsage() (uint32, nvml.Return)
	GetEnforcedPowerLimit() (uint32, nvml.Return)
	GetTemperature(nvml.TemperatureSensors) (uint32, nvml.Return)
	GetClockInfo(nvml.ClockType) (uint32, nvml.Return)
	GetCurrentClocksEventReasons() (uint64, nvml.Return)
	GetCurrentClocksThrottleReasons() (uint64, nvml.Return)
	GetEccMode() (nvml.EnableState, nvml.EnableState, nvml.Return)
	GetTotalEccErrors(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return)
	GetRemappedRows() (int, int, bool, bool, nvml.Return)
	GetNvLinkState(int) (nvml.EnableState, nvml.Return)
	GetNvLinkErrorCounter(int, nvml.NvLinkErrorCounter) (uint64, nvml.Return)
	GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return)
	GetMigMode() (int, int, nvml.Return)
	GetMaxMigDeviceCount() (int, nvml.Return)
	GetMigDeviceHandleByIndex(int) (nvml.Device, nvml.Return)
	IsMigDeviceHandle() (bool, nvml.Return)
	GetSupportedEventTypes() (uint64, nvml.Return)
	RegisterEvents(uint64, nvml.EventSet) nvml.Return
}

var (
	_ Lib    = nvml.Interface(nil)
	_ Device = nvml.Device(nil)
)

// State is what NVML can tell on this node.
type State string

const (
	StateOK        State = "ok"         // Init succeeded, at least one GPU
	StateNoLibrary State = "no_library" // libnvidia-ml.so cannot be loaded
	StateNoDriver  State = "no_driver"  // the library loads, the kernel driver is not loaded
	StateNoDevice  State = "no_device"  // NVML answers and counts no GPU
	StateError     State = "error"      // Init or the count failed another way (the reason says how)
	StateClosed    State = "closed"     // Close was called
	// StateNotSampled: no sampler has run here (a report read from a data
	// dir no daemon wrote GPU rings to); NVML was not asked.
	StateNotSampled State = "not_sampled"
)

// Status is the state with its reason, for a person or an LLM.
type Status struct {
	State   State  `json:"state"`
	Reason  string `json:"reason,omitempty"`
	Driver  string `json:"driver,omitempty"`
	Devices int    `json:"devices"`
}

// DefaultLibrary is the name go-nvml loads.
const DefaultLibrary = "libnvidia-ml.so.1"

// NVML is one initialised (or refused) NVML session. Its methods are safe
// for concurrent use; NVML itself is thread-safe.
type NVML struct {
	lib Lib

	mu     sync.Mutex
	status Status
	devs   []nvml.Device // handles by index, when State is StateOK
	// noHandle says why devs[i] is nil.
	noHandle []string
	refs     sync.WaitGroup
	sampling atomic.Bool          // a Sample's NVML calls are in flight
	stops    []context.CancelFunc // the watchers', cancelled by Close
}

// closeWait bounds how long Close waits for NVML calls in flight.
var closeWait = 10 * time.Second

// Open loads NVML from path (DefaultLibrary when empty) and initialises it.
// It never fails: what went wrong is in Status. No go-nvml call is made
// unless the library loaded, and nothing but Init unless Init succeeded.
func Open(path string) *NVML {
	if path == "" {
		path = DefaultLibrary
	}
	if _, err := bindLibrary(path); err != nil {
		return &NVML{status: Status{State: StateNoLibrary,
			Reason: fmt.Sprintf("NVML library %s cannot be loaded (%v): no NVIDIA driver on this node, or its libraries are not on the loader path (ldconfig, LD_LIBRARY_PATH, the container's NVIDIA runtime)", path, err)}}
	}
	return OpenLib(nvml.New(nvml.WithLibraryPath(path)))
}

// OpenLib initialises any Lib: go-nvml's library, or a mock server in tests.
func OpenLib(lib Lib) *NVML {
	n := &NVML{}
	ret, perr := call(lib.Init)
	switch {
	case perr != nil:
		n.status = Status{State: StateError, Reason: "NVML Init: " + perr.Error()}
		return n
	case ret == nvml.ERROR_LIBRARY_NOT_FOUND:
		n.status = Status{State: StateNoLibrary, Reason: "NVML Init: the NVML library was not found (no NVIDIA driver installed on this node)"}
		return n
	case ret == nvml.ERROR_DRIVER_NOT_LOADED:
		n.status = Status{State: StateNoDriver, Reason: "NVML Init: the NVIDIA kernel driver is not loaded (nvidia.ko missing or failed; see dmesg, `lsmod | grep nvidia`)"}
		return n
	case ret == nvml.ERROR_NO_PERMISSION:
		n.status = Status{State: StateError, Reason: "NVML Init: no permission to open /dev/nvidiactl or /dev/nvidia* (run as a user in the video group, or give the container the devices)"}
		return n
	case ret != nvml.SUCCESS:
		n.status = Status{State: StateError, Reason: "NVML Init: " + Reason(ret)}
		return n
	}
	n.lib = lib
	drv, _, _ := call2(lib.SystemGetDriverVersion)
	count, ret, perr := call2(lib.DeviceGetCount)
	switch {
	case perr != nil:
		n.status = Status{State: StateError, Driver: drv, Reason: "NVML device count: " + perr.Error()}
	case ret != nvml.SUCCESS:
		n.status = Status{State: StateError, Driver: drv, Reason: "NVML device count: " + Reason(ret)}
	case count <= 0:
		n.status = Status{State: StateNoDevice, Driver: drv, Reason: "NVML counts no GPU on this node (driver " + drv + "): none installed, all excluded, or CUDA_VISIBLE_DEVICES/the container hides them"}
	default:
		count = min(count, MaxDevices)
		n.status = Status{State: StateOK, Driver: drv, Devices: count}
		n.devs = make([]nvml.Device, count)
		n.noHandle = make([]string, count)
		for i := range n.devs {
			d, ret, perr := call2(func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleByIndex(i) })
			if perr == nil && ret == nvml.SUCCESS && d != nil {
				n.devs[i] = d
			} else {
				n.noHandle[i] = "NVML gave no handle for this GPU at Init: " + why(ret, perr)
			}
		}
	}
	return n
}

// MaxDevices bounds the GPUs one node reports (NVML's own limit is 64).
const MaxDevices = 64

// Status says what this session can do.
func (n *NVML) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.status
}

// Ready: NVML answered and counted GPUs.
func (n *NVML) Ready() bool { return n.Status().State == StateOK }

// ErrNotReady: an operation that needs GPUs on a session that has none.
var ErrNotReady = errors.New("gpu: NVML not ready")

// acquire holds the session open for one operation, or says why not.
func (n *NVML) acquire() ([]nvml.Device, error) {
	devs, _, err := n.acquireWhy()
	return devs, err
}

func (n *NVML) acquireWhy() ([]nvml.Device, []string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.status.State != StateOK {
		return nil, nil, fmt.Errorf("%w: %s: %s", ErrNotReady, n.status.State, n.status.Reason)
	}
	n.refs.Add(1)
	return n.devs, n.noHandle, nil
}

// Close stops the watchers, waits for the NVML calls in flight and shuts
// NVML down. A call stuck in NVML (a wedged GPU) is waited for at most
// closeWait; Shutdown is then skipped and the error says so. Further
// calls answer ErrNotReady.
func (n *NVML) Close() error {
	n.mu.Lock()
	lib, stops := n.lib, n.stops
	n.status = Status{State: StateClosed, Reason: "closed"}
	n.lib, n.devs, n.stops = nil, nil, nil
	n.mu.Unlock()
	if lib == nil {
		return nil
	}
	for _, stop := range stops {
		stop()
	}
	idle := make(chan struct{})
	go func() { n.refs.Wait(); close(idle) }()
	select {
	case <-idle:
	case <-time.After(closeWait):
		return fmt.Errorf("gpu: an NVML call has not returned after %s (a wedged GPU or driver): NVML not shut down", closeWait)
	}
	if ret, perr := call(lib.Shutdown); perr != nil || ret != nvml.SUCCESS {
		return fmt.Errorf("NVML Shutdown: %s", why(ret, perr))
	}
	return nil
}

// call runs one NVML call; a panic (a mock without that function, a
// binding bug) becomes an error rather than taking the daemon down.
func call(f func() nvml.Return) (ret nvml.Return, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return f(), nil
}

func call2[T any](f func() (T, nvml.Return)) (v T, ret nvml.Return, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	v, ret = f()
	return v, ret, nil
}

// Reason is an NVML return code in words. It never calls into the library
// (nvmlErrorString is a C call, unsafe before Init succeeded).
func Reason(r nvml.Return) string {
	switch r {
	case nvml.SUCCESS:
		return "success"
	case nvml.ERROR_NOT_SUPPORTED:
		return "not supported by this GPU or driver"
	case nvml.ERROR_GPU_IS_LOST:
		return "GPU is lost (fell off the bus or stopped answering: see Xid 79 in dmesg; it needs a reset)"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission (needs root or the device's group)"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "the installed driver's NVML lacks this function (older driver)"
	case nvml.ERROR_UNINITIALIZED:
		return "NVML not initialised"
	case nvml.ERROR_INVALID_ARGUMENT:
		return "invalid argument (no such link, index or counter)"
	case nvml.ERROR_NOT_FOUND:
		return "not found"
	case nvml.ERROR_TIMEOUT:
		return "timed out"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "NVIDIA kernel driver not loaded"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "NVML library not found"
	case nvml.ERROR_RESET_REQUIRED:
		return "GPU needs a reset"
	case nvml.ERROR_CORRUPTED_INFOROM:
		return "corrupted infoROM"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "NVML library and kernel driver versions differ (reload the driver or reboot)"
	case nvml.ERROR_IN_USE:
		return "in use"
	case nvml.ERROR_NO_DATA:
		return "no data"
	case nvml.ERROR_INSUFFICIENT_SIZE:
		return "buffer too small"
	case nvml.ERROR_NOT_READY:
		return "not ready"
	case nvml.ERROR_GPU_NOT_FOUND:
		return "GPU not found"
	case nvml.ERROR_UNKNOWN:
		return "unknown NVML error"
	}
	return fmt.Sprintf("NVML error %d", int(r))
}
