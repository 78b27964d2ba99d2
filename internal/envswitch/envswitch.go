// Package envswitch is the one reading of on/off PROBING_* variables: a
// typo must stop the program at start rather than quietly mean off (or on).
package envswitch

import (
	"fmt"
	"strings"
)

// Parse reads name's value v: 1, true, on, yes (any case, surrounding space
// ignored) are on; 0, false, off, no and empty are off; anything else is an
// error naming the variable and the values.
func Parse(name, v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "on", "yes":
		return true, nil
	case "", "0", "false", "off", "no":
		return false, nil
	}
	return false, fmt.Errorf("%s=%q: want 1, true, on or yes to switch it on; 0, false, off, no or unset for off", name, v)
}
