package stacks

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on the strings a process put in its stacks (file, function and
// thread names): they reach the model, and a job can name its threads and
// files anything (issue 23: 20 KB names made one get_stacks answer 722,000
// characters).
const (
	maxFileText     = 256
	maxFunctionText = 128
	maxNameText     = 64
)

// jobText makes s safe to show as job data: control characters and invalid
// UTF-8 escaped (\xNN), cut to n bytes with the cut marked by "…". A path
// keeps its tail (the file's own name), anything else its head.
func jobText(s string, n int, tail bool) string {
	clean := true
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w <= 1 || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			clean = false
			break
		}
		i += w
	}
	if !clean {
		var b strings.Builder
		for i := 0; i < len(s) && b.Len() <= 4*n; {
			r, w := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && w <= 1 || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				for _, c := range []byte(s[i : i+w]) {
					b.WriteString(`\x`)
					if c < 0x10 {
						b.WriteByte('0')
					}
					b.WriteString(strconv.FormatUint(uint64(c), 16))
				}
			} else {
				b.WriteString(s[i : i+w])
			}
			i += w
		}
		s = b.String()
	}
	if len(s) <= n {
		return s
	}
	if tail {
		i := len(s) - n
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		return "…" + s[i:]
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// boundFrames returns frames whose strings are bounded job text.
func boundFrames(fr []Frame) []Frame {
	for i := range fr {
		fr[i].File = jobText(fr[i].File, maxFileText, true)
		fr[i].Function = jobText(fr[i].Function, maxFunctionText, false)
	}
	return fr
}
