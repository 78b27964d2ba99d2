// Package jobtext is the one rule for showing text that came from the
// training job (frame, file, thread and host names, exception messages,
// command lines, SQL cells, a node's problem lines) to a model: such text
// is data, and a job or a hostile node can write anything into it,
// instructions included (issue 23).
//
// The convention: job text is shown between ⟦ and ⟧. Inside, every
// character that could change how the text reads is escaped: control
// characters (\n, \t, \r, \x1b, …), Unicode format, bidi and zero-width
// characters (\u202e, \u200b, …) and invalid UTF-8 (\xNN); the marks
// themselves and their look-alikes (〚 〛) become ‹ and ›, so a quote is one
// line, nothing inside can close it early, and a quote of a line that
// quotes (a node's problem line) reads ⟦… ‹job text› …⟧. A quote is
// clipped to a bound; the cut is said next to it on the side it was made:
// ⟦head⟧…[+N bytes] or …[+N bytes]⟦tail⟧, N the bytes left out.
// Structured (JSON) content keeps the raw value, clipped (Clip): JSON
// escapes its control characters, and Clip the invisible runes JSON
// would leave (bidi, format, zero-width).
package jobtext

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The marks around job text.
const (
	Open  = "⟦"
	Close = "⟧"
)

// Bounds for the common kinds of job text, in bytes of escaped text.
const (
	Name    = 64  // a thread, host, group or op name, a config key
	Func    = 128 // a function name
	Path    = 256 // a file path (kept by its tail)
	Message = 200 // an exception message, a node's problem line
	Line    = 300 // a command line, a source line
)

// Quote returns s as marked job text: escaped, its head kept within n
// bytes of escaped text, the cut said after the close mark.
func Quote(s string, n int) string {
	body, rest := head(s, n)
	q := Open + body + Close
	if rest > 0 {
		q += cutMark(rest)
	}
	return q
}

// QuoteTail is Quote keeping the tail (a path keeps its file's name), the
// cut said before the open mark.
func QuoteTail(s string, n int) string {
	body, rest := tail(s, n)
	q := Open + body + Close
	if rest > 0 {
		q = cutMark(rest) + q
	}
	return q
}

// Escape returns s escaped as inside a quote, its head within n bytes,
// unmarked ("…" at a cut): for words of ours that may carry the job's
// bytes (an os error's), where a quote would mark them as the job's.
func Escape(s string, n int) string {
	body, rest := head(s, n)
	if rest > 0 {
		body += "…"
	}
	return body
}

// Clip cuts raw job text to at most n bytes on a rune boundary, makes it
// valid UTF-8 and says the cut ("…[+N bytes]"): for structured content,
// where the encoder escapes control characters. The invisible ones JSON
// leaves as they are (bidi, format, zero-width) are escaped as in a quote,
// before the cut (so the bound holds; N counts escaped bytes).
func Clip(s string, n int) string {
	return clip(unhide(s), n)
}

// ClipTail is Clip keeping the tail (a path keeps its file's name).
func ClipTail(s string, n int) string {
	return clipTail(unhide(s), n)
}

// unhide escapes the runes JSON would carry raw that change how text
// reads (hidden's, above U+007F); ASCII controls are JSON's to escape.
func unhide(s string) string {
	i := 0
	for i < len(s) {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if hidden(r) {
			break
		}
		i += w
	}
	if i == len(s) {
		return s
	}
	b := []byte(s[:i])
	for i < len(s) {
		if s[i] < utf8.RuneSelf {
			b = append(b, s[i])
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		b = escapeRune(b, s[i:i+w], r, w)
		i += w
	}
	return string(b)
}

func clip(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) {
		return s
	}
	i := min(n, len(s))
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	c := strings.ToValidUTF8(s[:i], "\uFFFD")
	if i < len(s) {
		c += cutMark(len(s) - i)
	}
	return c
}

// Token shows a word from a closed vocabulary that job or node text
// fills (a thread state, a capture source, a status) as is when it is one
// (letters, digits and _.:/@+- within n bytes), else quoted: a node may
// send anything there.
func Token(s string, n int) string {
	if s == "" || len(s) > n {
		return Quote(s, n)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_.:/@+-", c) >= 0) {
			return Quote(s, n)
		}
	}
	return s
}

func clipTail(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) {
		return s
	}
	i := max(0, len(s)-n)
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	c := strings.ToValidUTF8(s[i:], "\uFFFD")
	if i > 0 {
		c = cutMark(i) + c
	}
	return c
}

// Cut cuts a rendered line that may hold quotes to at most n bytes (plus
// the closing mark and "…"): a quote cut open is closed, and an escape cut
// in half is dropped, so the rest of the answer never reads as job text.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	p := halfEscape(s[:n])
	if strings.LastIndex(p, Open) > strings.LastIndex(p, Close) {
		p += Close
	}
	return p + "…"
}

// CutLine makes one line of ours of s, cut to n bytes (Cut): newlines
// and runs of spaces become one space, so that one item stays one line,
// and any control character left is escaped (Clean). Job text in it must
// be quoted already.
func CutLine(s string, n int) string {
	return Cut(Clean(strings.Join(strings.Fields(s), " ")), n)
}

// halfEscape drops an escape the cut left incomplete at p's end (half of
// \u202e or \x1b).
func halfEscape(p string) string {
	k := strings.LastIndexByte(p, '\\')
	if k < 0 || len(p)-k >= 10 {
		return p
	}
	if k == len(p)-1 {
		return p[:k]
	}
	want := 0
	switch p[k+1] {
	case 'x':
		want = 4
	case 'u':
		want = 6
	case 'U':
		want = 10
	}
	if want > len(p)-k {
		return p[:k]
	}
	return p
}

// Clean escapes what a text of ours must never hold raw (control, format
// and bidi characters, invalid UTF-8; newlines are kept, they are the
// caller's) and keeps the marks: a net under lines that quote job text,
// for a path or an error that reached one unquoted. It does not bound or
// mark anything.
func Clean(s string) string {
	if clean(strings.ReplaceAll(s, "\n", "")) {
		return s
	}
	var b strings.Builder
	var buf [16]byte
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\n' || r == 0x27e6 || r == 0x27e7 || !hidden(r) && !(r == utf8.RuneError && w <= 1):
			b.WriteString(s[i : i+w])
		default:
			b.Write(escapeRune(buf[:0], s[i:i+w], r, w))
		}
		i += w
	}
	return b.String()
}

func cutMark(n int) string { return "…[+" + strconv.Itoa(n) + " bytes]" }

// head escapes s from its start until n bytes of escaped text; rest is how
// many bytes of s were left out.
func head(s string, n int) (body string, rest int) {
	if clean(s) && len(s) <= n {
		return s, 0
	}
	var b strings.Builder
	var buf [16]byte
	i := 0
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		e := escapeRune(buf[:0], s[i:i+w], r, w)
		if b.Len()+len(e) > n {
			break
		}
		b.Write(e)
		i += w
	}
	return b.String(), len(s) - i
}

// tail is head from the end of s.
func tail(s string, n int) (body string, rest int) {
	if clean(s) && len(s) <= n {
		return s, 0
	}
	var parts [][]byte
	size, i := 0, len(s)
	for i > 0 {
		r, w := utf8.DecodeLastRuneInString(s[:i])
		e := escapeRune(nil, s[i-w:i], r, w)
		if size+len(e) > n {
			break
		}
		parts = append(parts, e)
		size += len(e)
		i -= w
	}
	b := make([]byte, 0, size)
	for k := len(parts) - 1; k >= 0; k-- {
		b = append(b, parts[k]...)
	}
	return string(b), i
}

// clean: nothing in s needs escaping.
func clean(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w <= 1 || hidden(r) {
			return false
		}
		i += w
	}
	return true
}

// hidden: a rune shown escaped. Everything not printable (controls,
// format and bidi characters such as U+202A-202E and U+2066-2069,
// zero-width ones, separators other than the space, private use,
// unassigned), the invisible ones that are letters or marks (variation
// selectors, the grapheme joiner, Hangul fillers), and the marks and the
// brackets that look like them (shown as ‹ ›).
func hidden(r rune) bool {
	switch {
	case r == 0x27e6, r == 0x27e7, r == 0x301a, r == 0x301b:
		return true
	case r >= 0xfe00 && r <= 0xfe0f, r >= 0xe0100 && r <= 0xe01ef, r == 0x034f,
		r == 0x115f, r == 0x1160, r == 0x3164, r == 0xffa0:
		return true
	}
	return !unicode.IsPrint(r)
}

// escapeRune appends the escaped form of one rune (raw, its bytes in s)
// to dst.
func escapeRune(dst []byte, raw string, r rune, w int) []byte {
	if r == utf8.RuneError && w <= 1 {
		return appendHex(dst, raw[0])
	}
	if r < utf8.RuneSelf {
		switch {
		case r == '\n':
			return append(dst, `\n`...)
		case r == '\t':
			return append(dst, `\t`...)
		case r == '\r':
			return append(dst, `\r`...)
		case r < 0x20 || r == 0x7f:
			return appendHex(dst, byte(r))
		}
		return append(dst, byte(r))
	}
	switch r {
	case 0x27e6, 0x301a:
		return append(dst, "‹"...)
	case 0x27e7, 0x301b:
		return append(dst, "›"...)
	}
	if !hidden(r) {
		return append(dst, raw...)
	}
	if r > 0xffff {
		dst = append(dst, `\U`...)
		return appendPadded(dst, uint64(r), 8)
	}
	dst = append(dst, `\u`...)
	return appendPadded(dst, uint64(r), 4)
}

func appendHex(dst []byte, c byte) []byte {
	dst = append(dst, `\x`...)
	return appendPadded(dst, uint64(c), 2)
}

func appendPadded(dst []byte, v uint64, width int) []byte {
	h := strconv.FormatUint(v, 16)
	for i := len(h); i < width; i++ {
		dst = append(dst, '0')
	}
	return append(dst, h...)
}

// Word is a closed-vocabulary word a job or node filled (a source, a
// kind, a state): "-" when empty, as is when a plain word, else quoted.
func Word(s string) string {
	if s == "" {
		return "-"
	}
	return Token(s, Name)
}
