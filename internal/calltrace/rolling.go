package calltrace

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// rolling is the jsonl_gz format: numbered segments <prefix>.000001.jsonl.gz,
// <prefix>.000002.jsonl.gz, ... The live segment is plain JSONL
// (<prefix>.NNNNNN.jsonl) and is gzipped whole when it rolls: written to a
// temporary file, synced, renamed into place, and only then is the plain
// one removed. A process killed at any point leaves every earlier segment
// readable, and the live one readable as plain text (its torn last line,
// if any, cut off by the next writer). A segment holds at most RollBytes
// bytes (a longer line alone) and RollLines lines; at most Segments
// segments are kept, the live one included, the oldest removed first.
//
// Servers of the same user may share a prefix: <prefix>.lock is flocked
// around each batch and holds the live segment's number, so they agree
// on which segment is live and roll it once.
type rolling struct {
	prefix    string
	dir, base string
	rollBytes int64
	rollLines int64
	keep      int
	logger    *slog.Logger

	lock *os.File
	seq  int64    // the live segment f is
	f    *os.File // nil until the live segment is opened
	// size and lines of f as this process last saw it, under the lock.
	size, lines int64
}

// segExts are the segments' names after <prefix>.<number>.
const (
	extPlain = ".jsonl"
	extGz    = ".jsonl.gz"
	extTmp   = ".jsonl.gz.tmp"
)

func openRolling(path string, rollBytes, rollLines int64, keep int, logger *slog.Logger) (*rolling, error) {
	// "calls.jsonl.gz" as a prefix would name calls.jsonl.gz.000001.jsonl.gz.
	for _, ext := range []string{extGz, extPlain, ".gz"} {
		path = strings.TrimSuffix(path, ext)
	}
	r := &rolling{prefix: path, dir: filepath.Dir(path), base: filepath.Base(path),
		rollBytes: rollBytes, rollLines: rollLines, keep: keep, logger: logger}
	if err := r.openLock(); err != nil {
		return nil, err
	}
	// Tidy what an earlier process left: finished segments still plain
	// (killed mid-roll), more segments than kept.
	unlock, err := lockFile(r.lock)
	if err != nil {
		return nil, err
	}
	defer unlock()
	seq, err := r.liveSeq()
	if err != nil {
		return nil, err
	}
	r.finish(seq)
	return r, nil
}

func (r *rolling) segment(seq int64, ext string) string {
	return fmt.Sprintf("%s.%06d%s", r.prefix, seq, ext)
}

func (r *rolling) openLock() error {
	if r.lock != nil {
		_ = r.lock.Close()
		r.lock = nil
	}
	f, err := openPrivate(r.prefix+".lock", os.O_RDWR|os.O_CREATE)
	if err != nil {
		return err
	}
	r.lock = f
	return nil
}

func (r *rolling) write(lines [][]byte) (int, error) {
	if r.lock == nil || !sameFile(r.lock, r.prefix+".lock") {
		// The directory vanished, or the lock file: start again there.
		if err := r.openLock(); err != nil {
			return 0, err
		}
	}
	unlock, err := lockFile(r.lock)
	if err != nil {
		return 0, err
	}
	defer unlock()
	seq, err := r.liveSeq()
	if err != nil {
		return 0, err
	}
	if err := r.openLive(seq); err != nil {
		return 0, err
	}
	written := 0
	var chunk []byte
	n := 0 // lines in chunk
	for _, l := range lines {
		size, count := r.size+int64(len(chunk)), r.lines+int64(n)
		if count > 0 && (size+int64(len(l)) > r.rollBytes || (r.rollLines > 0 && count+1 > r.rollLines)) {
			if err := r.appendChunk(chunk, n); err != nil {
				return written, err
			}
			written += n
			chunk, n = chunk[:0], 0
			if err := r.roll(); err != nil {
				return written, err
			}
		}
		chunk = append(chunk, l...)
		n++
	}
	if err := r.appendChunk(chunk, n); err != nil {
		return written, err
	}
	written += n
	if r.size >= r.rollBytes || (r.rollLines > 0 && r.lines >= r.rollLines) {
		// Full: finish it now rather than when the next record comes,
		// which may be never.
		if err := r.roll(); err != nil {
			r.logger.Warn("call records: rolling the full segment failed; the next batch tries again", "segment", r.segment(r.seq, extPlain), "err", err)
		}
	}
	return written, nil
}

// appendChunk appends n lines (chunk) to the live segment, opened if the
// last roll closed it.
func (r *rolling) appendChunk(chunk []byte, n int) error {
	if n == 0 {
		return nil
	}
	if r.f == nil {
		if err := r.openLive(r.seq); err != nil {
			return err
		}
	}
	if err := appendAt(r.f, r.size, chunk); err != nil {
		return err
	}
	r.size += int64(len(chunk))
	r.lines += int64(n)
	return nil
}

// liveSeq reads the live segment's number from the lock file; a new or
// unreadable lock file is set from the segments there are.
func (r *rolling) liveSeq() (int64, error) {
	var b [21]byte
	n, _ := r.lock.ReadAt(b[:], 0)
	if seq, err := strconv.ParseInt(strings.TrimSpace(string(b[:n])), 10, 64); err == nil && seq > 0 {
		return seq, nil
	}
	segs, err := r.segments()
	if err != nil {
		return 0, err
	}
	seq := int64(1)
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		seq = last.seq
		if last.gz {
			seq++ // finished: the next is live
		}
	}
	return seq, r.setSeq(seq)
}

func (r *rolling) setSeq(seq int64) error {
	// Fixed width at offset 0: no truncation, one small write.
	if _, err := r.lock.WriteAt(fmt.Appendf(nil, "%020d\n", seq), 0); err != nil {
		return fmt.Errorf("record the live segment in %s: %w", r.lock.Name(), err)
	}
	return nil
}

// openLive makes f the live segment seq, and size and lines what it holds
// now: other servers may have appended, or rolled it, since this one last
// looked.
func (r *rolling) openLive(seq int64) error {
	path := r.segment(seq, extPlain)
	if r.f == nil || r.seq != seq || !sameFile(r.f, path) {
		if r.f != nil {
			_ = r.f.Close()
			r.f = nil
		}
		f, err := openPrivate(path, os.O_RDWR|os.O_APPEND|os.O_CREATE)
		if err != nil {
			return err
		}
		r.f, r.seq, r.size, r.lines = f, seq, 0, 0
	}
	size, err := cutTornTail(r.f)
	if err != nil {
		return err
	}
	switch {
	case size > r.size:
		n, err := countLines(r.f, r.size, size)
		if err != nil {
			return err
		}
		r.lines += n
	case size < r.size:
		n, err := countLines(r.f, 0, size)
		if err != nil {
			return err
		}
		r.lines = n
	}
	r.size = size
	return nil
}

// roll closes the live segment, makes the next one live, and finishes the
// closed one (gzip, then the cap).
func (r *rolling) roll() error {
	next := r.seq + 1
	if err := r.setSeq(next); err != nil {
		return err
	}
	if r.f != nil {
		_ = r.f.Close()
		r.f = nil
	}
	r.seq, r.size, r.lines = next, 0, 0
	r.finish(next)
	return nil
}

type seg struct {
	seq int64
	gz  bool
}

// segments lists this prefix's segments by number; a number that is both
// plain and gzipped (a roll killed between rename and remove) is gzipped.
func (r *rolling) segments() ([]seg, error) {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", r.dir, err)
	}
	bySeq := map[int64]bool{}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), r.base+".")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		num, ext, _ := strings.Cut(rest, ".")
		seq, err := strconv.ParseInt(num, 10, 64)
		if err != nil || seq <= 0 {
			continue
		}
		switch "." + ext {
		case extGz:
			bySeq[seq] = true
		case extPlain:
			if _, ok := bySeq[seq]; !ok {
				bySeq[seq] = false
			}
		}
	}
	segs := make([]seg, 0, len(bySeq))
	for s, gz := range bySeq {
		segs = append(segs, seg{s, gz})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].seq < segs[j].seq })
	return segs, nil
}

// finish applies the cap to the segments before live (keeping Segments-1
// of them, the newest) and gzips those still plain. Failures are logged:
// the records already written stay where they are.
func (r *rolling) finish(live int64) {
	segs, err := r.segments()
	if err != nil {
		r.logger.Warn("call records: cannot list the segments", "err", err)
		return
	}
	var done []seg
	for _, s := range segs {
		if s.seq < live {
			done = append(done, s)
		}
	}
	for len(done) > r.keep-1 {
		s := done[0]
		done = done[1:]
		for _, ext := range []string{extGz, extPlain, extTmp} {
			if err := os.Remove(r.segment(s.seq, ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				r.logger.Warn("call records: cannot remove an old segment", "segment", r.segment(s.seq, ext), "err", err)
			}
		}
	}
	for _, s := range done {
		plain := r.segment(s.seq, extPlain)
		if s.gz {
			// Killed between rename and remove: the gzip is whole.
			_ = os.Remove(plain)
			_ = os.Remove(r.segment(s.seq, extTmp))
			continue
		}
		if err := r.gzip(s.seq); err != nil {
			r.logger.Warn("call records: cannot gzip a finished segment; it stays plain", "segment", plain, "err", err)
		}
	}
}

// gzip compresses finished segment seq whole, then removes the plain one.
func (r *rolling) gzip(seq int64) error {
	plain, tmp, gz := r.segment(seq, extPlain), r.segment(seq, extTmp), r.segment(seq, extGz)
	in, err := openPrivate(plain, os.O_RDWR)
	if err != nil {
		return err
	}
	defer in.Close()
	size, err := cutTornTail(in)
	if err != nil {
		return err
	}
	out, err := openPrivate(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(out)
	zw.Name = filepath.Base(plain)
	zw.ModTime = time.Now()
	_, err = io.Copy(zw, io.NewSectionReader(in, 0, size))
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, gz)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	syncDir(r.dir)
	return os.Remove(plain)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

func (r *rolling) close() error {
	var err error
	if r.f != nil {
		err = r.f.Close()
		r.f = nil
	}
	if r.lock != nil {
		if cerr := r.lock.Close(); err == nil {
			err = cerr
		}
		r.lock = nil
	}
	return err
}
