package flightrecorder

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/probing-mcp/probing-mcp/flightrecorder/pickle"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// DefaultMaxFileBytes caps one dump file. A 2000-entry dump with stacks is
// about 1 MiB; 64 MiB leaves room for 100k-entry rings.
const DefaultMaxFileBytes = 64 << 20

// LoadOptions say where ranks come from and how much to read.
type LoadOptions struct {
	// Prefix is the file-name prefix before the rank, as fr_trace's
	// --prefix; empty means infer it from the file names.
	Prefix string
	// RankOf maps a file path to its rank, overriding the name.
	RankOf map[string]int
	// RankHint says how this caller maps a file to its rank (the CLI's
	// "--rank FILE=N"), named in the problem of a file whose rank cannot be
	// told; empty when the caller has no such means.
	RankHint string
	// MaxFileBytes caps each file; 0 means DefaultMaxFileBytes.
	MaxFileBytes int64
	// Workers decode files in parallel; 0 means GOMAXPROCS.
	Workers int
	// Check, when set, vets every file before it is read (an MCP tool uses
	// it to keep symlinks from leading out of the allowed directories).
	Check func(path string) error
	// Limits are the rank and group ceilings, the decode budget and the
	// memory ceiling; zero fields take PROBING_FR_* or the defaults.
	Limits Limits
	// Progress, when set, is told after every file (one call at a time).
	Progress func(Progress)
}

// FileProblem is a file that was not analysed, and why.
type FileProblem struct {
	Path    string `json:"path"`
	Rank    *int   `json:"rank,omitempty"`
	Problem string `json:"problem"`
}

// Text is the problem in one line: the path is a file name anyone could
// choose (a dump in /tmp), so it is quoted, and said once: the problem's
// own copies of it (an os error's) become "the file".
func (fp FileProblem) Text() string {
	why := fp.Problem
	if fp.Path != "" {
		why = strings.ReplaceAll(why, fp.Path, "the file")
	}
	return jobtext.QuoteTail(fp.Path, jobtext.Path) + ": " + jobtext.Escape(why, jobtext.Line)
}

// Loaded is the outcome of Load: the dumps that decoded, sorted by rank, and
// everything that went wrong on the way.
type Loaded struct {
	Dumps    []*Dump
	Prefix   string        // the prefix used (inferred or given)
	Problems []FileProblem // files that looked like dumps but were not used
	Ignored  int           // files that were not dumps at all (no digits suffix, wrong content)
	read     int64         // bytes of dump files read (metrics)
}

// fr_trace's rank pattern: a [\w-] prefix, lazily, then the trailing digits.
var rankSuffix = regexp.MustCompile(`([\w\-]*?)(\d+)$`)

type candidate struct {
	path    string
	name    string
	prefix  string
	rank    int
	explict bool // named on the command line, not found by walking
	notDump bool // named like a dump, but neither pickle nor JSON inside
}

// Load finds and decodes the dumps under paths (files or directories,
// walked recursively). It fails only when no dump could be loaded at all;
// per-file failures are listed in Loaded.Problems.
func Load(paths []string, opt LoadOptions) (*Loaded, error) {
	return LoadContext(context.Background(), paths, opt)
}

// LoadContext is Load that stops, with ctx's error, once ctx is done: it
// checks between files and every few thousand entries, and nothing it
// started runs on after it returns.
func LoadContext(ctx context.Context, paths []string, opt LoadOptions) (_ *Loaded, err error) {
	var (
		res   *Loaded
		guard *memGuard
	)
	defer observeLoad(time.Now(), &res, &guard, &err) // metrics.go
	if opt.MaxFileBytes <= 0 {
		opt.MaxFileBytes = DefaultMaxFileBytes
	}
	lim, err := opt.Limits.resolve()
	if err != nil {
		return nil, err
	}
	opt.Limits = lim
	res = &Loaded{}
	var files []candidate
	for _, p := range paths {
		found, err := collect(ctx, p, opt, res)
		if err != nil {
			return nil, err
		}
		files = append(files, found...)
	}
	files = choosePrefix(files, opt, res)
	files = dropDuplicates(files, res)
	gctx, guard, stop := guardMemory(ctx, lim, "decoding the dumps")
	res.Dumps, err = decodeAll(gctx, files, opt, res, newByteBudget(lim.DecodeBudget), guard)
	stop()
	if err != nil {
		return nil, ceilingErr(guard, err)
	}
	slices.SortFunc(res.Problems, func(a, b FileProblem) int { return cmp.Compare(a.Path, b.Path) })
	if len(res.Dumps) == 0 {
		return res, noDumpsError(paths, res)
	}
	return res, nil
}

func noDumpsError(paths []string, res *Loaded) error {
	where := strings.Join(paths, ", ")
	if len(res.Problems) == 0 {
		if res.Ignored == 0 {
			return fmt.Errorf("no Flight Recorder dumps in %s: no files found", where)
		}
		return fmt.Errorf("no Flight Recorder dumps in %s: %d files, none named like a dump (<prefix><rank>, e.g. nccl_trace_rank_0) with pickle or JSON content", where, res.Ignored)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "no Flight Recorder dump in %s could be used:", where)
	for i, p := range res.Problems {
		if i == 5 {
			fmt.Fprintf(&b, "\n  ... and %d more", len(res.Problems)-5)
			break
		}
		fmt.Fprintf(&b, "\n  %s: %s", p.Path, p.Problem)
	}
	return errors.New(b.String())
}

// collect lists the candidate dump files under one path.
func collect(ctx context.Context, path string, opt LoadOptions, res *Loaded) ([]candidate, error) {
	info, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s does not exist", path)
		}
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if !info.IsDir() {
		c, ok, problem := classify(path, info, opt, true)
		if !ok {
			return nil, fmt.Errorf("%s: %s", path, problem)
		}
		return []candidate{c}, nil
	}
	var out []candidate
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			res.Problems = append(res.Problems, FileProblem{Path: p, Problem: "unreadable: " + err.Error()})
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		info, err := os.Stat(p) // follows a symlink to a file; WalkDir never follows one to a directory
		if err != nil {
			res.Problems = append(res.Problems, FileProblem{Path: p, Problem: "unreadable: " + err.Error()})
			return nil
		}
		if opt.Check != nil {
			if err := opt.Check(p); err != nil {
				res.Problems = append(res.Problems, FileProblem{Path: p, Problem: "not read: " + err.Error()})
				return nil
			}
		}
		c, ok, problem := classify(p, info, opt, false)
		switch {
		case ok:
			out = append(out, c)
		case problem != "":
			res.Problems = append(res.Problems, FileProblem{Path: p, Problem: problem})
		default:
			res.Ignored++
		}
		return nil
	})
	return out, err
}

// classify decides whether a file is a dump candidate. A walked file that is
// plainly not a dump (no rank suffix, a FIFO such as torch's ".pipe"
// trigger) is ignored without a problem; a file named on the command line
// must be usable.
func classify(path string, info fs.FileInfo, opt LoadOptions, explicit bool) (candidate, bool, string) {
	c := candidate{path: path, name: filepath.Base(path), explict: explicit}
	if !info.Mode().IsRegular() {
		// Never opened: reading a FIFO (torch's debug-info trigger) blocks.
		if explicit || rankSuffix.MatchString(c.name) {
			return c, false, "not a regular file (" + info.Mode().Type().String() + "); not read"
		}
		return c, false, ""
	}
	if r, ok := opt.RankOf[path]; ok {
		c.rank, c.prefix = r, "\x00explicit"
		if err := opt.Limits.checkRank("rank", int64(r)); err != nil {
			return c, false, err.Error()
		}
		return c, true, ""
	}
	if opt.Prefix != "" {
		i := strings.Index(c.name, opt.Prefix)
		if i < 0 {
			if explicit {
				return c, false, fmt.Sprintf("file name does not contain the prefix %q", opt.Prefix)
			}
			return c, false, ""
		}
		digits := c.name[i+len(opt.Prefix):]
		r, err := strconv.Atoi(digits)
		if err != nil || r < 0 {
			if errors.Is(err, strconv.ErrRange) && digits[0] != '-' && digits[0] != '+' {
				r, err = math.MaxInt, nil // past any ceiling, refused below
			} else {
				if explicit {
					return c, false, fmt.Sprintf("no rank after the prefix %q in the file name", opt.Prefix)
				}
				return c, false, ""
			}
		}
		c.rank, c.prefix = r, opt.Prefix
	} else {
		m := rankSuffix.FindStringSubmatch(c.name)
		if m == nil {
			if explicit {
				fix := "rename the files <prefix><rank>, e.g. nccl_trace_rank_3"
				if opt.RankHint != "" {
					fix += ", or " + opt.RankHint
				}
				return c, false, "cannot tell the rank: the file name does not end in digits (" + fix + ")"
			}
			return c, false, ""
		}
		r, err := strconv.Atoi(m[2])
		if err != nil {
			r = math.MaxInt // past any ceiling
		}
		c.rank, c.prefix = r, m[1]
	}
	if !explicit && !looksLikeDump(path) {
		c.notDump = true
	}
	// The rank ceiling: per-rank structures follow the ranks present, but a
	// rank number past any job is a mistake or an attack, and is named.
	if c.rank >= opt.Limits.MaxRanks && !c.notDump {
		rank := strconv.Itoa(c.rank)
		if c.rank == math.MaxInt {
			rank = "past 2^63"
		}
		return c, false, fmt.Sprintf("rank %s in the file name is over the ceiling of %d ranks (set %s higher for a larger job%s)", rank, opt.Limits.MaxRanks, EnvMaxRanks, orHint(opt.RankHint))
	}
	if c.rank >= opt.Limits.MaxRanks {
		return c, false, "" // not a dump either: ignored
	}
	return c, true, ""
}

// looksLikeDump sniffs the first bytes: a pickle starts with PROTO (0x80),
// a JSON dump with '{'.
func looksLikeDump(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return true // let decoding report the error
	}
	defer f.Close()
	buf := make([]byte, 64)
	n, _ := io.ReadFull(f, buf)
	b := bytes.TrimLeft(buf[:n], " \t\r\n")
	return n > 0 && (buf[0] == 0x80 || (len(b) > 0 && b[0] == '{'))
}

// choosePrefix keeps one family of files. fr_trace insists on a single
// prefix; a directory holding two prefixes usually mixes two jobs, so the
// larger family is analysed and the other listed as a problem.
func choosePrefix(files []candidate, opt LoadOptions, res *Loaded) []candidate {
	count := map[string]int{}
	for _, f := range files {
		if !f.explict && !f.notDump && f.prefix != "\x00explicit" {
			count[f.prefix]++
		}
	}
	if len(count) == 0 {
		res.Prefix = opt.Prefix
		kept := files[:0]
		for _, f := range files {
			if f.notDump {
				res.Ignored++
			} else {
				kept = append(kept, f)
			}
		}
		return kept
	}
	prefixes := make([]string, 0, len(count))
	for p := range count {
		prefixes = append(prefixes, p)
	}
	sort.Slice(prefixes, func(i, j int) bool {
		if count[prefixes[i]] != count[prefixes[j]] {
			return count[prefixes[i]] > count[prefixes[j]]
		}
		return prefixes[i] < prefixes[j]
	})
	res.Prefix = prefixes[0]
	kept := files[:0]
	for _, f := range files {
		if f.notDump {
			// Named like this job's dumps but holding something else is worth
			// a word; any other file ending in digits is not.
			if f.prefix == res.Prefix {
				res.Problems = append(res.Problems, FileProblem{Path: f.path, Problem: "named like a dump but not a Flight Recorder dump (neither pickle nor JSON)"})
			} else {
				res.Ignored++
			}
			continue
		}
		if f.explict || f.prefix == "\x00explicit" || f.prefix == res.Prefix {
			kept = append(kept, f)
			continue
		}
		r := f.rank
		res.Problems = append(res.Problems, FileProblem{Path: f.path, Rank: &r, Problem: fmt.Sprintf(
			"not analysed: its prefix %q differs from %q (%d files); the input seems to mix dumps of different jobs, pass the prefix to choose",
			f.prefix, res.Prefix, count[res.Prefix])})
	}
	return kept
}

// dropDuplicates refuses ranks claimed by two files: we cannot know which
// one belongs to the job, so neither is used.
func dropDuplicates(files []candidate, res *Loaded) []candidate {
	byRank := map[int][]string{}
	for _, f := range files {
		byRank[f.rank] = append(byRank[f.rank], f.path)
	}
	kept := files[:0]
	for _, f := range files {
		if paths := byRank[f.rank]; len(paths) > 1 {
			r := f.rank
			others := slices.DeleteFunc(slices.Clone(paths), func(p string) bool { return p == f.path })
			res.Problems = append(res.Problems, FileProblem{Path: f.path, Rank: &r, Problem: fmt.Sprintf(
				"rank %d also comes from %s: two dumps for one rank (two jobs in one directory?); neither is used", r, strings.Join(others, ", "))})
			continue
		}
		kept = append(kept, f)
	}
	return kept
}

// reuseBytes is the largest dump after which a worker keeps its decoder
// and read buffer for the next file. Reuse saves clearing megabytes per
// dump in a thousand-rank job; after a larger file, the buffers are let go
// (and collected) so that an idle worker does not hold memory the budget
// no longer counts.
const reuseBytes = 8 << 20

func decodeAll(ctx context.Context, files []candidate, opt LoadOptions, res *Loaded, budget *byteBudget, guard *memGuard) ([]*Dump, error) {
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	dumps := make([]*Dump, len(files))
	problems := make([]string, len(files))
	var wg sync.WaitGroup
	sigs := newInterner()
	prog := newProgress(opt.Progress, "decode", len(files))
	var read atomic.Int64
	defer budget.wakeOn(ctx)()
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dec *pickle.Decoder
			var buf []byte // reused: decoded dumps keep no reference to it
			for i := range next {
				if ctx.Err() != nil {
					continue // drain: the caller stops sending
				}
				if dec == nil {
					dec = pickle.NewDecoder(pickle.Limits{})
				}
				d, size, err := readDump(ctx, dec, sigs, files[i].path, opt, budget, &buf)
				read.Add(size)
				if size > reuseBytes {
					// Let the buffers go, and collect them now: the garbage
					// collector would otherwise wait for the heap to double
					// past what this file held, and the next large file
					// would be decoded on top of this one's garbage.
					dec, buf = nil, nil
					runtime.GC()
				}
				guard.check() // between files: an overshoot is one file's worth
				if err != nil {
					problems[i] = err.Error()
					prog.add(1, size, 0)
					continue
				}
				d.Rank = files[i].rank
				dumps[i] = d
				prog.add(1, size, int64(len(d.Entries)))
			}
		}()
	}
	for i := range files {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	res.read = read.Load()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]*Dump, 0, len(files))
	for i, d := range dumps {
		if d != nil {
			out = append(out, d)
			continue
		}
		r := files[i].rank
		res.Problems = append(res.Problems, FileProblem{Path: files[i].path, Rank: &r, Problem: problems[i]})
	}
	slices.SortFunc(out, func(a, b *Dump) int { return cmp.Compare(a.Rank, b.Rank) })
	return out, nil
}

// readDump reads and decodes one file, refusing files over the limit before
// reading them (and files that grow past it while being read). It holds
// the file's size of the decode budget while the file is in memory, and
// returns the size it read.
func readDump(ctx context.Context, dec *pickle.Decoder, sigs *interner, path string, opt LoadOptions, budget *byteBudget, buf *[]byte) (*Dump, int64, error) {
	limit := opt.MaxFileBytes
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !info.Mode().IsRegular() {
		return nil, 0, errors.New("not a regular file")
	}
	if info.Size() > limit {
		return nil, 0, fmt.Errorf("file is %d bytes, over the %d-byte limit (raise PROBING_MAX_FILE_SIZE or --max-file-size)", info.Size(), limit)
	}
	taken, err := budget.acquire(ctx, info.Size())
	if err != nil {
		return nil, 0, err
	}
	defer budget.release(taken)
	// Read what stat promised in one allocation, then check the file did
	// not grow past the limit meanwhile.
	if int64(cap(*buf)) < info.Size()+1 {
		*buf = make([]byte, info.Size()+1)
	}
	data := (*buf)[:info.Size()]
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, info.Size(), fmt.Errorf("file shrank while being read: %v", err)
	}
	if more, _ := io.ReadAll(io.LimitReader(f, limit+1-info.Size())); len(more) > 0 {
		data = append(data, more...)
		if int64(len(data)) > limit {
			return nil, int64(len(data)), fmt.Errorf("file grew past the %d-byte limit while being read", limit)
		}
	}
	d, err := decodeWith(ctx, dec, sigs, data, opt.Limits)
	if err != nil {
		return nil, int64(len(data)), err
	}
	d.Path = path
	return d, int64(len(data)), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func orHint(h string) string {
	if h == "" {
		return ""
	}
	return ", or " + h
}
