package gpu

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// nvmlReasons label the NVML return codes counted; any other is "unknown"
// (a bounded label set, whatever the driver returns).
var nvmlReasons = map[nvml.Return]string{
	nvml.ERROR_GPU_IS_LOST:        "gpu_is_lost",
	nvml.ERROR_NO_PERMISSION:      "no_permission",
	nvml.ERROR_FUNCTION_NOT_FOUND: "function_not_found",
	nvml.ERROR_UNINITIALIZED:      "uninitialized",
	nvml.ERROR_INVALID_ARGUMENT:   "invalid_argument",
	nvml.ERROR_NOT_FOUND:          "not_found",
	nvml.ERROR_TIMEOUT:            "timeout",
	nvml.ERROR_DRIVER_NOT_LOADED:  "driver_not_loaded",
	nvml.ERROR_LIBRARY_NOT_FOUND:  "library_not_found",
	nvml.ERROR_RESET_REQUIRED:     "reset_required",
}

// observeNVML counts one failed NVML read by its return code. "Not
// supported" is no failure: many GPUs and drivers lack some fields, and
// every round would count them again.
func observeNVML(ret nvml.Return, panicked error) {
	switch {
	case panicked != nil:
		metrics.NVMLError("panic")
	case ret == nvml.ERROR_NOT_SUPPORTED:
	default:
		reason, ok := nvmlReasons[ret]
		if !ok {
			reason = "unknown"
		}
		metrics.NVMLError(reason)
	}
}
