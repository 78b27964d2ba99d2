// Package history is the server's persisted record: Flight Recorder
// snapshots, stack captures, diagnoses and the audit trail, kept in one
// SQLite file under the data directory so that the evidence outlives both
// the server and the training job that produced it.
//
// Every insert is its own transaction and is durable when it returns
// (synchronous=FULL). Several goroutines may share a Store, and several
// processes (two servers, a CLI) may open the same file: SQLite's locks
// serialize the writers and busy_timeout makes them wait instead of fail.
package history

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/probing-mcp/probing-mcp/internal/safefile"
	"github.com/probing-mcp/probing-mcp/storage/fsinfo"
)

// DefaultMaxBlobBytes caps one snapshot's raw dump. Real per-rank dumps
// are a few MiB; a much larger one is a mistake or an attack, and SQLite
// would hold all of it in memory at once.
const DefaultMaxBlobBytes = 64 << 20

// sqliteMaxLength is SQLite's default SQLITE_MAX_LENGTH: no string or
// BLOB can be larger, whatever MaxBlobBytes says.
const sqliteMaxLength = 1_000_000_000

// busyTimeoutMS is how long a writer waits for another connection or
// process to finish its transaction before it gives up.
const busyTimeoutMS = 5000

// Errors that callers may test with errors.Is. The returned errors wrap
// them with the file's name and the details.
var (
	// ErrNotHistory: the file exists but is not a probing-mcp history
	// database (not SQLite at all, or someone else's SQLite file).
	ErrNotHistory = errors.New("not a probing-mcp history database")
	// ErrNewerSchema: the file was written by a newer probing-mcp.
	ErrNewerSchema = errors.New("history database is newer than this binary")
	// ErrReadOnly: a write on a Store opened with ReadOnly.
	ErrReadOnly = errors.New("history database opened read-only")
)

// DefaultPath is where the server keeps its history:
// <dataDir>/probing-mcp/history.db, dataDir being storage.DataDir.
func DefaultPath(dataDir string) string {
	return filepath.Join(dataDir, "probing-mcp", "history.db")
}

// Options tune Open. The zero value opens read-write with the defaults.
type Options struct {
	// ReadOnly opens an existing database without writing to it: no
	// creation, no migration, no journal change. The file must already be
	// at SchemaVersion. Files that are not history databases are refused
	// before SQLite opens them; for a history database in WAL mode SQLite
	// itself creates the empty -wal and -shm files that any reader needs
	// (the next read-write close removes them).
	ReadOnly bool
	// MaxBlobBytes caps the data of one snapshot; 0 means
	// DefaultMaxBlobBytes. It cannot exceed SQLite's 1e9-byte limit.
	MaxBlobBytes int64
	// DetectFS says which file system holds a path and whether it is a
	// network one; nil means fsinfo.NetworkFS. Tests use it to take the
	// network path on a local disk; a caller that knows better (an
	// operator flag) can override the detection.
	DetectFS func(path string) (name string, network bool, err error)
}

// Mode is how a Store ended up opened.
type Mode struct {
	Journal   string // SQLite's journal_mode: "wal" locally, "delete" on a network file system
	FS        string // the file system, as fsinfo names it
	NetworkFS bool   // no WAL and no mmap: see Open
	ReadOnly  bool
	Version   int // schema version of the file
}

func (m Mode) String() string {
	s := fmt.Sprintf("journal=%s fs=%s schema=v%d", m.Journal, m.FS, m.Version)
	if m.NetworkFS {
		s += " (network file system: no WAL, no mmap)"
	}
	if m.ReadOnly {
		s += " read-only"
	}
	return s
}

// Store is an open history database. Its methods are safe for concurrent
// use.
type Store struct {
	db      *sql.DB
	path    string
	mode    Mode
	maxBlob int64
	// wmu queues this process's writers so that they do not spend the
	// busy timeout polling each other; the timeout is then left for
	// other processes.
	wmu sync.Mutex
}

// Open opens the history database at path, creating it (mode 0600, its
// directory 0700) and bringing its schema up to SchemaVersion unless
// opt.ReadOnly is set.
//
// On a local file system the journal is WAL: readers never block the
// writer, and commits append instead of rewriting pages. On a network file
// system (NFS, Lustre, GPFS, FUSE mounts...) it is the rollback journal
// (journal_mode=DELETE) with memory mapping off, because WAL's index is a
// shared-memory file that hosts cannot share over the network and mmap'd
// pages are not kept coherent there. Mode reports the choice.
//
// Opening a file written by a newer binary fails (ErrNewerSchema), even
// read-only: columns whose meaning changed would be misread silently. A
// file that is not a history database fails with ErrNotHistory and is left
// untouched.
func Open(path string, opt Options) (*Store, error) {
	return open(path, opt, migrations)
}

// open is Open with the migrations as a parameter, so tests can stop at
// an older version or add a newer one.
func open(path string, opt Options, migs []string) (*Store, error) {
	if path == "" {
		return nil, errors.New("history: empty database path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("history: %s: %w", path, err)
	}
	maxBlob := opt.MaxBlobBytes
	switch {
	case maxBlob == 0:
		maxBlob = DefaultMaxBlobBytes
	case maxBlob < 0 || maxBlob > sqliteMaxLength:
		return nil, fmt.Errorf("history: MaxBlobBytes %d: want 1 to %d", maxBlob, sqliteMaxLength)
	}
	if err := prepareFile(abs, opt.ReadOnly); err != nil {
		return nil, err
	}
	detect := opt.DetectFS
	if detect == nil {
		detect = fsinfo.NetworkFS
	}
	fsName, network, err := detect(abs)
	if err != nil {
		// WAL on a network file system can corrupt the database; the
		// rollback journal is only slower on a local one.
		fsName, network = "unknown (statfs failed: "+err.Error()+")", true
	}

	s := &Store{path: abs, maxBlob: maxBlob, mode: Mode{FS: fsName, NetworkFS: network, ReadOnly: opt.ReadOnly}}
	s.db = sql.OpenDB(connector{dsn: dsn(abs, opt.ReadOnly), drv: &sqlite3.SQLiteDriver{ConnectHook: connectHook(network)}})
	if err := s.init(migs); err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// prepareFile checks what is at path before SQLite sees it: SQLite says
// only "unable to open database file" for a directory, blocks on a FIFO,
// and notices a text file only at the first query. A new file is created
// here so that it gets mode 0600; SQLite gives its -wal and -shm files the
// database's mode.
func prepareFile(path string, readOnly bool) error {
	// SQLite opens the file and its -wal, -shm and -journal by name, so
	// they are safe only in a directory nobody else can write: there a
	// name cannot be swapped for a link after the checks below.
	dir := filepath.Dir(path)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) && readOnly {
		return fmt.Errorf("history: %s does not exist (a read-only open creates nothing)", path)
	}
	if err := safefile.PrivateDir(dir); err != nil {
		return fmt.Errorf("history: %w; or set PROBING_MCP_HISTORY to a file in a directory of your own", err)
	}
	// Opened once, never through a link (a dangling one named history.db
	// is refused, not created at its target) and never blocking on a FIFO.
	flag := os.O_RDONLY
	if !readOnly {
		flag = os.O_RDWR | os.O_CREATE
	}
	f, fi, err := safefile.OpenRegular(path, flag, 0o600)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("history: %s does not exist (a read-only open creates nothing)", path)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("history: %s is a directory: %w", path, ErrNotHistory)
	case err != nil && strings.Contains(err.Error(), "not a regular file"):
		return fmt.Errorf("history: %w: %w", err, ErrNotHistory)
	case err != nil:
		return fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	if err := safefile.Check(fi, os.Geteuid(), os.Getegid()); err != nil {
		return fmt.Errorf("history: %w", safefile.Refused(path, err))
	}
	if fi.Size() == 0 {
		return nil // SQLite takes an empty file as an empty database
	}
	var hdr [sqliteHeaderSize]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil || !bytes.Equal(hdr[:16], []byte("SQLite format 3\x00")) {
		return fmt.Errorf("history: %s is not a SQLite file: %w", path, ErrNotHistory)
	}
	if why := badHeader(hdr[:]); why != "" {
		return fmt.Errorf("history: %s has a broken SQLite header (%s): %w", path, why, ErrNotHistory)
	}
	if readOnly && hdr[19] == 2 {
		return checkWALHeader(path, hdr[:])
	}
	return nil
}

// errNeedsUpgrade: a read-only open of a file whose schema is older than
// this binary's, which only a read-write open migrates.
func errNeedsUpgrade(path string, have, want int) error {
	return fmt.Errorf("history: %s has schema v%d, this binary needs v%d: open it read-write once to upgrade it",
		path, have, want)
}

// sqliteHeaderSize is the size of the database header at the start of
// page 1 (https://sqlite.org/fileformat2.html#the_database_header).
const sqliteHeaderSize = 100

// badHeader says what is wrong with the fixed fields of a SQLite header,
// or "" when nothing is. SQLite checks some of them only after it has
// acted on others: it opens the -wal of a file whose header says WAL
// before it looks at the page size, so a file of garbage can make it
// create files next to it.
func badHeader(h []byte) string {
	switch ps := binary.BigEndian.Uint16(h[16:18]); {
	case ps != 1 && (ps < 512 || ps&(ps-1) != 0):
		return fmt.Sprintf("page size %d", ps)
	case h[18] != 1 && h[18] != 2, h[19] != 1 && h[19] != 2:
		return fmt.Sprintf("file format versions %d/%d", h[18], h[19])
	case h[21] != 64 || h[22] != 32 || h[23] != 32:
		return fmt.Sprintf("payload fractions %d/%d/%d", h[21], h[22], h[23])
	case binary.BigEndian.Uint32(h[44:48]) > 4:
		return fmt.Sprintf("schema format %d", binary.BigEndian.Uint32(h[44:48]))
	case binary.BigEndian.Uint32(h[56:60]) > 3:
		return fmt.Sprintf("text encoding %d", binary.BigEndian.Uint32(h[56:60]))
	}
	return ""
}

// checkWALHeader vets a WAL-mode file before a read-only open. SQLite
// creates the -wal and -shm files of a WAL database even on a read-only
// connection, so a read-only open of someone else's file would leave two
// files behind. With no -wal file there is no writer and no uncommitted
// page 1, so the header on disk is the whole truth and is checked here.
func checkWALHeader(path string, h []byte) error {
	if _, err := os.Lstat(path + "-wal"); err == nil {
		return nil // a writer's log: only SQLite can read the current header
	}
	appID := binary.BigEndian.Uint32(h[68:72])
	version := binary.BigEndian.Uint32(h[60:64])
	schemaCookie := binary.BigEndian.Uint32(h[40:44])
	switch {
	case appID == applicationID:
		return nil
	case appID == 0 && version == 0 && schemaCookie == 0:
		return errNeedsUpgrade(path, 0, SchemaVersion)
	}
	return fmt.Errorf("history: %s has application_id %#x, version %d: %w", path, appID, version, ErrNotHistory)
}

// dsn is the SQLite URI for path. Per-connection settings ride in the URI
// so that every connection database/sql opens gets them, not just the
// first. _txlock=immediate makes every transaction take the write lock at
// BEGIN, where busy_timeout applies; a deferred transaction that upgrades
// later can fail with SQLITE_BUSY at once.
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busyTimeoutMS))
	q.Set("_foreign_keys", "1")
	q.Set("_synchronous", "FULL") // nothing recorded may be lost on a crash
	q.Set("_txlock", "immediate")
	if readOnly {
		q.Set("mode", "ro")
	}
	// The path is percent-encoded: SQLite decodes it, and a '?' or '#'
	// in a directory name would otherwise end the path.
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// journalSizeLimit is what a checkpointed WAL file is truncated back to.
// Without it the -wal file stays at its high-water mark, and one large
// snapshot would leave tens of MiB behind in the data directory, which is
// RAM when it is /dev/shm.
const journalSizeLimit = 32 << 20

// connectHook sets what the DSN cannot.
func connectHook(network bool) func(*sqlite3.SQLiteConn) error {
	pragmas := []string{fmt.Sprintf("PRAGMA journal_size_limit = %d", journalSizeLimit)}
	if network {
		pragmas = append(pragmas, "PRAGMA mmap_size = 0")
	}
	return func(c *sqlite3.SQLiteConn) error {
		for _, p := range pragmas {
			if _, err := c.Exec(p, nil); err != nil {
				return err
			}
		}
		return nil
	}
}

// connector opens connections with the Store's own driver value, so that
// the connect hook is per Store and no global driver name is registered.
type connector struct {
	dsn string
	drv *sqlite3.SQLiteDriver
}

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c connector) Driver() driver.Driver                        { return c.drv }

// init checks that the file is ours and not too new, sets the journal and
// migrates. Nothing is written before the checks pass.
func (s *Store) init(migs []string) error {
	var appID, version, objects int
	err := s.db.QueryRow(`SELECT (SELECT application_id FROM pragma_application_id),
		(SELECT user_version FROM pragma_user_version),
		(SELECT count(*) FROM sqlite_master)`).Scan(&appID, &version, &objects)
	if err != nil {
		return s.wrap("reading the header of", err)
	}
	fresh := appID == 0 && version == 0 && objects == 0
	if !fresh && appID != applicationID {
		return fmt.Errorf("history: %s has application_id %#x, version %d, %d schema objects: %w",
			s.path, appID, version, objects, ErrNotHistory)
	}
	if version > len(migs) {
		return fmt.Errorf("history: %s has schema v%d, this binary knows up to v%d (upgrade probing-mcp): %w",
			s.path, version, len(migs), ErrNewerSchema)
	}
	if s.mode.ReadOnly {
		if version < len(migs) {
			return errNeedsUpgrade(s.path, version, len(migs))
		}
		s.mode.Version = version
		return s.db.QueryRow("PRAGMA journal_mode").Scan(&s.mode.Journal)
	}

	want := "wal"
	if s.mode.NetworkFS {
		want = "delete"
	}
	if err := s.setJournal(want); err != nil {
		return s.wrap("setting journal_mode="+want+" on", err)
	}
	if s.mode.Journal != want {
		return fmt.Errorf("history: %s: journal_mode is %q, wanted %q", s.path, s.mode.Journal, want)
	}
	for {
		v, done, err := s.migrateOne(migs)
		if err != nil {
			return err
		}
		if done {
			s.mode.Version = v
			return nil
		}
	}
}

// setJournal sets the journal mode, which is persistent for WAL and set
// outside any transaction. SQLite can answer SQLITE_BUSY to the change
// without calling the busy handler, when waiting could deadlock with
// another process that is switching or committing at the same moment (two
// servers opening a new file together do), so the wait is done here, for
// as long as the busy timeout.
func (s *Store) setJournal(want string) error {
	deadline := time.Now().Add(busyTimeoutMS * time.Millisecond)
	for {
		err := s.db.QueryRow("PRAGMA journal_mode = " + want).Scan(&s.mode.Journal)
		var se sqlite3.Error
		if err == nil || !errors.As(err, &se) || se.Code != sqlite3.ErrBusy || time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// migrateOne applies the next migration, if any, in one transaction. It
// rereads the version inside the transaction: another process may have
// migrated since init looked.
func (s *Store) migrateOne(migs []string) (version int, done bool, err error) {
	tx, err := s.db.Begin()
	if err != nil {
		return 0, false, s.wrap("locking", err)
	}
	defer tx.Rollback()
	if err := tx.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		return 0, false, s.wrap("reading the version of", err)
	}
	if version > len(migs) {
		return 0, false, fmt.Errorf("history: %s has schema v%d, this binary knows up to v%d (upgrade probing-mcp): %w",
			s.path, version, len(migs), ErrNewerSchema)
	}
	if version == len(migs) {
		return version, true, nil
	}
	if _, err := tx.Exec(migs[version]); err != nil {
		return 0, false, fmt.Errorf("history: %s: migration to v%d: %w", s.path, version+1, err)
	}
	// PRAGMA takes no bound parameters; version is our own integer.
	if _, err := tx.Exec(fmt.Sprintf("PRAGMA user_version = %d", version+1)); err != nil {
		return 0, false, fmt.Errorf("history: %s: migration to v%d: %w", s.path, version+1, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, false, fmt.Errorf("history: %s: committing migration to v%d: %w", s.path, version+1, err)
	}
	return version + 1, false, nil
}

// wrap names the file in a SQLite error and turns SQLite's own "not a
// database" into ErrNotHistory. A damaged history file is not reported as
// someone else's file: the fix differs.
func (s *Store) wrap(doing string, err error) error {
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrNotADB {
		return fmt.Errorf("history: %s %s: %v: %w", doing, s.path, err, ErrNotHistory)
	}
	if errors.As(err, &se) && se.Code == sqlite3.ErrCorrupt {
		return fmt.Errorf("history: %s %s: the database is damaged (move it aside to start afresh): %w", doing, s.path, err)
	}
	return fmt.Errorf("history: %s %s: %w", doing, s.path, err)
}

// Path is the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Mode reports the journal and file system the Store was opened with.
func (s *Store) Mode() Mode { return s.mode }

// Close closes the database. With WAL, the last connection to close in
// any process checkpoints and removes the -wal file.
func (s *Store) Close() error { return s.db.Close() }
