//go:build linux && (amd64 || arm64)

package gpu

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
int gpu_nvml_bind(const char *path, char *err, int errlen);
int gpu_nvml_stubs(void);
*/
import "C"

import (
	"errors"
	"sync"
	"unsafe"
)

var bindMu sync.Mutex

// bindLibrary loads the library at path and points this package's NVML
// stubs at it; it returns how many of the symbols go-nvml uses it has.
// Binding twice (another path, a reopen) is harmless: slots are only
// ever moved from the fallback to a real function of a library kept open.
func bindLibrary(path string) (int, error) {
	bindMu.Lock()
	defer bindMu.Unlock()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf [512]C.char
	n := C.gpu_nvml_bind(cpath, &buf[0], C.int(len(buf)))
	if n < 0 {
		return 0, errors.New(C.GoString(&buf[0]))
	}
	return int(n), nil
}

// stubCount is how many NVML symbols this package defines.
func stubCount() int { return int(C.gpu_nvml_stubs()) }
