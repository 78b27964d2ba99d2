// Package bytesize reads and writes the sizes people give in PROBING_*
// variables and flags, one way for every one of them: KB/MB/GB/TB are
// decimal, KiB/MiB/GiB/TiB binary, and bare K/M/G/T binary as in nginx or
// Docker; case and a space before the unit do not matter.
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

var units = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// Parse accepts "4194304", "512KB", "8MiB", "8 M" and the like: a positive
// whole number and an optional unit.
func Parse(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	digits := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if digits < 0 {
		digits = len(s)
	}
	n, err := strconv.ParseInt(s[:digits], 10, 64)
	mult, known := units[strings.ToLower(strings.TrimSpace(s[digits:]))]
	if err != nil || n <= 0 || !known || n > math.MaxInt64/mult {
		return 0, false
	}
	return n * mult, true
}

// Format writes n as people set it: "256 MiB", "64 KiB", "1000 bytes".
func Format(n int64) string {
	for _, u := range []struct {
		name string
		m    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.m && n%u.m == 0 {
			return fmt.Sprintf("%d %s", n/u.m, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
