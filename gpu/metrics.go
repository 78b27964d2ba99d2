package gpu

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// observeNVML counts one failed NVML read by its return code. "Not
// supported" is no failure: many GPUs and drivers lack some fields, and
// every round would count them again.
func observeNVML(ret nvml.Return, panicked error) {
	if panicked != nil {
		metrics.NVMLError("panic")
		return
	}
	reason := "unknown"
	switch ret {
	case nvml.ERROR_NOT_SUPPORTED:
		return
	case nvml.ERROR_GPU_IS_LOST:
		reason = "gpu_is_lost"
	case nvml.ERROR_NO_PERMISSION:
		reason = "no_permission"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		reason = "function_not_found"
	case nvml.ERROR_UNINITIALIZED:
		reason = "uninitialized"
	case nvml.ERROR_INVALID_ARGUMENT:
		reason = "invalid_argument"
	case nvml.ERROR_NOT_FOUND:
		reason = "not_found"
	case nvml.ERROR_TIMEOUT:
		reason = "timeout"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		reason = "driver_not_loaded"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		reason = "library_not_found"
	case nvml.ERROR_RESET_REQUIRED:
		reason = "reset_required"
	}
	metrics.NVMLError(reason)
}
