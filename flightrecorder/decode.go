package flightrecorder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/flightrecorder/pickle"
)

// Supported format versions. Newer minors only add fields, so a newer minor
// is decoded with a warning; other majors are refused.
const (
	minMinor = 2
	maxMinor = 10
)

// Decode parses one dump, pickle or JSON (sniffed from the first byte),
// under the default Limits. The rank is not in the dump; the caller sets
// it.
func Decode(data []byte) (*Dump, error) {
	return DecodeContext(context.Background(), data, Limits{})
}

// DecodeContext is Decode under lim (zero fields: PROBING_FR_* or the
// defaults), giving up with ctx's error once ctx is done.
//
// Decoding errors never quote the file: a file handed over by mistake (a
// key file named like a dump) must not leak through the message. They say
// what the file is not, where (offsets, keys, positions) and how big.
func DecodeContext(ctx context.Context, data []byte, lim Limits) (*Dump, error) {
	lim, err := lim.resolve()
	if err != nil {
		return nil, err
	}
	return decodeWith(ctx, nil, nil, data, lim)
}

// decodeWith decodes with a reusable pickle decoder (nil: a fresh one),
// numbering signatures in sigs (nil: a table of its own).
func decodeWith(ctx context.Context, dec *pickle.Decoder, sigs *interner, data []byte, lim Limits) (*Dump, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	switch {
	case len(data) > 0 && data[0] == 0x80:
		if dec == nil {
			dec = pickle.NewDecoder(pickle.Limits{})
		}
		return decodePickle(ctx, dec, sigs, data, lim)
	case len(trimmed) > 0 && trimmed[0] == '{':
		return decodeJSON(ctx, sigs, trimmed, lim)
	case len(data) == 0:
		return nil, errors.New("empty file")
	}
	return nil, fmt.Errorf("not a Flight Recorder dump: neither a pickle (first byte 0x80) nor a JSON object ('{'); its first byte is 0x%02x", trimmedFirst(data))
}

func trimmedFirst(data []byte) byte {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 {
		return t[0]
	}
	return data[0]
}

// finishVersion validates the version string and records it.
func (d *Dump) finishVersion() error {
	if d.Version == "" {
		return errors.New(`no "version" key: not a Flight Recorder dump`)
	}
	maj, min, err := ParseVersion(d.Version)
	if err != nil {
		return fmt.Errorf("version (a %d-byte string) is not MAJOR.MINOR, e.g. \"2.10\": not a Flight Recorder dump", len(d.Version))
	}
	d.Major, d.Minor = maj, min
	if maj != 2 || min < minMinor {
		return fmt.Errorf("unsupported Flight Recorder version %d.%d: this analyzer reads 2.%d to 2.%d", maj, min, minMinor, maxMinor)
	}
	if min > maxMinor {
		d.warn("version %s is newer than 2.%d: decoded as 2.%d, unknown fields ignored", d.Version, maxMinor, maxMinor)
	}
	return nil
}

func (d *Dump) warn(format string, args ...any) {
	if len(d.Warnings) < 20 {
		d.Warnings = append(d.Warnings, fmt.Sprintf(format, args...))
	} else if len(d.Warnings) == 20 {
		d.Warnings = append(d.Warnings, "more warnings omitted")
	}
}

// ParseRankList parses pg_config's ranks string: "[0, 1, 2]" or "[0,1,2]"
// (a Python list literal of non-negative ints).
func ParseRankList(s string) ([]int, error) {
	return parseRankList(s, Limits{MaxRanks: maxInt32})
}

const maxInt32 = 1<<31 - 1

// parseRankList is ParseRankList with the rank ceiling of lim. Its errors
// give positions, not the text.
func parseRankList(s string, lim Limits) ([]int, error) {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "[") || !strings.HasSuffix(t, "]") {
		return nil, fmt.Errorf("ranks (a %d-byte string) is not a list literal like \"[0, 1]\"", len(s))
	}
	t = strings.TrimSpace(t[1 : len(t)-1])
	if t == "" {
		return []int{}, nil
	}
	items := strings.Count(t, ",") + 1
	if strings.HasSuffix(t, ",") {
		items-- // a trailing comma
	}
	if err := lim.checkListLength(items); err != nil {
		return nil, err
	}
	out := make([]int, 0, items)
	for i := 0; t != ""; i++ {
		p, rest, more := strings.Cut(t, ",")
		t = rest
		p = strings.TrimSpace(p)
		if p == "" && !more {
			break // trailing comma
		}
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("ranks: item %d is not an integer", i)
		}
		if n < 0 || n >= int64(lim.MaxRanks) {
			return nil, lim.checkRank(fmt.Sprintf("ranks: item %d, rank", i), n)
		}
		out = append(out, int(n))
	}
	return out, nil
}
