// Package sqlite is the dedup store in an SQLite file: the lab's
// processed.db, by default. It keeps the record of each claim, the attempt
// log, and (when several consumers share the file) the in-progress rows
// that keep two of them from calling the partner with one id at once.
//
// One goroutine writes (writer.go), committing every waiting request in
// one transaction and making the durable ones durable with one fdatasync
// of the WAL. A store alone on its file keeps its claims in progress in
// memory (solo.go); one that shares it writes them as rows (claims.go).
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mattn/go-sqlite3"
	_ "github.com/mattn/go-sqlite3" // database/sql driver "sqlite3"

	"eaimq/internal/claim"
	"eaimq/internal/claim/proc"
	"eaimq/internal/linkpath"
)

// Store is a dedup store in an SQLite file.
type Store struct {
	db         *sql.DB
	path       string // as the user named it (EAI_MQ_DB), for messages
	file       string // the regular file it resolves to: SQLite's -wal lives beside it
	owner      string
	durability string     // the wanted durability of outcome records: full or normal
	walSync    bool       // fsync the WAL ourselves for durable writes (full, in WAL mode)
	ablation   Ablation   // benchmarks only
	readOnly   bool       // no writer: Begin and Finish fail
	created    string     // what Open created ("": nothing), for Created
	wal        *os.File   // the WAL, opened for fsync (walFile)
	walMu      sync.Mutex // guards wal's opening

	stmts   stmts
	reads   reads  // solo mode's Begin reads outside the writer
	known   *known // solo mode's filter of the ids with a record (nil: not solo)
	scanned chan struct{}
	endScan context.CancelFunc
	records struct {
		sync.Mutex
		full *sql.Stmt // Records' query of a full chunk, prepared at its first use
	}
	solo    solo
	reqs    chan *request
	stopped chan struct{}
	once    sync.Once

	liveness claim.Liveness // whether a holder on record still runs (proc.Liveness)
}

// Options tune Open.
type Options struct {
	// Synchronous is the durability of an outcome record: "full" (the
	// default) makes every commit survive a power loss before the consumer
	// acks; "normal" survives a process crash only.
	Synchronous string
	// ReadOnly opens an existing file without writing (the dlq tool).
	ReadOnly bool
	// Owner overrides this process's name in in-progress claims (tests
	// stand in for a second process with it); proc.Holder by default.
	Owner string
	// NoCreate refuses a file that does not exist (ErrNoStore) rather
	// than create it and its directory: a mistyped path would otherwise
	// start an empty store, and every claim delivered before would be
	// sent again.
	NoCreate bool
	// Liveness tells whether the holder of a claim in flight is gone, so
	// that its claim is taken before its lease runs out; proc.Liveness
	// (the holder's process no longer runs) by default. Tests stand in
	// for a holder's death with their own.
	Liveness claim.Liveness
	// Ablation turns speed mechanisms off, for the benchmarks that
	// measure what each buys; the zero value is the store as it runs.
	Ablation Ablation
}

// Ablation turns one or more of the store's speed mechanisms off, for the
// benchmarks behind the ablation table in docs/figures.md. No flag sets
// it: a store with any of them off is slower and no safer.
type Ablation struct {
	NoSolo    bool // never solo: every claim in progress written as a row, as when the file is shared
	NoKnown   bool // solo without the filter of known ids: Begin reads every record
	NoWALSync bool // SQLite fsyncs the WAL at every commit (synchronous=FULL), not the writer once per durable batch
}

// EnvPath names the variable that names the file, for messages.
const EnvPath = "EAI_MQ_DB"

var (
	errClosed   = errors.New("dedup store closed")
	errReadOnly = errors.New("dedup store opened read-only")
)

// ErrNoStore: Options.NoCreate, and there is no file at the path.
var ErrNoStore = errors.New("no such file")

// errNotRegular: the path names a device, a directory, a FIFO.
var errNotRegular = errors.New("not a regular file")

// Open opens the store at path, creating it (mode 0600) and its directory
// unless Options.NoCreate or ReadOnly says not to.
func Open(path string, o Options) (*Store, error) {
	if o.Synchronous == "" {
		o.Synchronous = "full"
	}
	if o.Synchronous != "full" && o.Synchronous != "normal" {
		return nil, fmt.Errorf("synchronous must be full or normal, not %q", o.Synchronous)
	}
	given := path
	path, err := resolve(path)
	if err != nil {
		return nil, fmt.Errorf("dedup store %s: %w", given, err)
	}
	created, err := create(path, given, o)
	if err != nil {
		return nil, err
	}
	dsn := dsnFor(path, o.ReadOnly)
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, fmt.Errorf("open dedup store %s: %w", path, err)
	}
	// One connection: the writer goroutine owns it, and SQLite allows one
	// writer at a time anyway.
	db.SetMaxOpenConns(1)
	if o.Owner == "" {
		o.Owner = proc.Holder()
	}
	if o.Liveness == nil {
		o.Liveness = proc.Liveness{}
	}
	s := &Store{db: db, path: given, file: path, owner: o.Owner, liveness: o.Liveness, durability: o.Synchronous, readOnly: o.ReadOnly, created: created, ablation: o.Ablation,
		reqs: make(chan *request, 256), stopped: make(chan struct{})}
	if err := s.initShared(o.ReadOnly); err != nil {
		db.Close()
		return nil, fmt.Errorf("dedup store %s: %w", given, err)
	}
	if o.ReadOnly {
		close(s.stopped)
		return s, nil
	}
	if err := s.start(dsn); err != nil {
		return nil, fmt.Errorf("dedup store %s: %w", given, err)
	}
	return s, nil
}

// initShared is init, tried again while another process holds the file
// locked. Consumers started together on one new file race for it: the
// switch to WAL and the schema's creation take locks that SQLite refuses
// at once (SQLITE_BUSY without waiting out the busy timeout, where
// waiting could deadlock), and init is safe to run again (the pragmas are
// idempotent; migrate reads the version under its write lock). Bounded by
// the busy timeout's 10 s (TestOpenNewFileConcurrently).
func (s *Store) initShared(readOnly bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		err := s.init(readOnly)
		var se sqlite3.Error
		if err == nil || !errors.As(err, &se) || (se.Code != sqlite3.ErrBusy && se.Code != sqlite3.ErrLocked) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(wait)
	}
}

// create makes sure the file exists, 0600: SQLite would create it 0644,
// and it holds claim ids and partner answers. It returns what it created,
// for Created: "" when the file was there. A read-only store, or one
// opened with NoCreate, needs the file there already.
func create(path, given string, o Options) (string, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return "", nil
	case o.ReadOnly || !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("open dedup store %s: %w", given, err)
	case o.NoCreate:
		return "", fmt.Errorf("dedup store %s: %w (%s)", abs(path), ErrNoStore, missing(path))
	}
	var made string
	if dir := firstMissing(filepath.Dir(path)); dir != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return "", fmt.Errorf("create directory for %s: %w", path, err)
		}
		made = ", in the new directory " + abs(filepath.Dir(path))
		if dir != filepath.Dir(path) {
			made += " (created from " + abs(dir) + " down)"
		}
	}
	// O_EXCL: of two consumers starting at once on a new path, only the
	// one that made the file says it did.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("open dedup store %s: %w", path, err)
	}
	return "a new SQLite file " + abs(path) + " (mode 0600)" + made, f.Close()
}

// firstMissing is the highest directory of dir's that does not exist: the
// first MkdirAll would make. "" when dir exists.
func firstMissing(dir string) string {
	first := ""
	for {
		if _, err := os.Stat(dir); err == nil {
			return first
		}
		first = dir
		up := filepath.Dir(dir)
		if up == dir {
			return first
		}
		dir = up
	}
}

// missing says what is missing of path: the file, or its directory too.
func missing(path string) string {
	if dir := firstMissing(filepath.Dir(path)); dir != "" {
		return "the directory " + abs(dir) + " does not exist either"
	}
	return "the directory is there, the file is not"
}

// abs is path made absolute for messages (a relative EAI_MQ_DB is relative
// to wherever the program was started, which a log line does not show).
func abs(path string) string {
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}

// Created says what Open created: "" when the file was there already,
// else a short phrase with the file's absolute path ("a new SQLite file
// /var/lib/eaimq/a.db (mode 0600)").
func (s *Store) Created() string { return s.created }

func dsnFor(path string, readOnly bool) string {
	q := url.Values{}
	q.Set("_busy_timeout", "10000")
	q.Set("_txlock", "immediate") // take the write lock at BEGIN: no upgrade deadlocks between processes
	q.Set("_foreign_keys", "1")
	mode := "rw"
	if readOnly {
		mode = "ro"
	}
	q.Set("mode", mode)
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// start prepares the writer's statements and the reads, starts the
// writer, and takes the store's place in the lock file.
func (s *Store) start(dsn string) error {
	if err := s.prepare(); err != nil {
		s.db.Close()
		return err
	}
	if err := s.openReads(dsn); err != nil {
		s.db.Close()
		return err
	}
	go s.writer()
	if err := s.openSolo(); err != nil {
		s.Close()
		return err
	}

	return nil
}

// Close stops the writer after the pending writes and closes the file.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closeSolo() // the watcher may be writing: before the writer stops
		close(s.reqs)
	})
	<-s.stopped
	if s.known != nil {
		s.endScan()
		<-s.scanned
	}
	if s.reads.db != nil {
		s.reads.db.Close()
	}
	if s.wal != nil {
		s.wal.Close()
	}
	s.records.Lock()
	if s.records.full != nil {
		s.records.full.Close()
	}
	s.records.Unlock()
	return s.db.Close()
}

// Path is the file's path as the user named it.
func (s *Store) Path() string { return s.path }

// resolve returns the regular file path names, following symbolic links
// (a dangling one too: the file is then created where it points). SQLite
// puts its -wal and -shm files beside the real file, and the writer fsyncs
// that WAL itself, so it must know where the real file is. Anything but a
// regular file or a new path (a device such as /dev/null, a directory, a
// FIFO) is refused: SQLite would leave -journal files beside it, and no
// record could be kept.
func resolve(path string) (string, error) {
	path, err := linkpath.Final(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return path, nil
	case err != nil:
		return "", err
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("%w (%s): set %s to a file path", errNotRegular, fi.Mode().Type(), EnvPath)
	}
	return path, nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
