//go:build !(linux && (amd64 || arm64))

package gpu

import "github.com/NVIDIA/go-nvml/pkg/dl"

// bindLibrary checks that the library loads before go-nvml is asked to
// Init. Off linux/amd64 and linux/arm64 this package defines no stubs: go-nvml's lazy
// binding applies, and LD_BIND_NOW=1 without the library still stops the
// process at start.
func bindLibrary(path string) (int, error) {
	lib := dl.New(path, dl.RTLD_LAZY|dl.RTLD_GLOBAL)
	if err := lib.Open(); err != nil {
		return 0, err
	}
	return 0, nil // kept open: go-nvml opens it again
}

func stubCount() int { return 0 }
