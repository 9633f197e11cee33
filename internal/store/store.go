// Package store is the consumer's dedup store (EAI_MQ_DB): the record of
// processed message_ids, the in-progress claims that keep two consumers
// from calling the partner with the same id at once, and the attempt log that
// says why a claim went to the dead-letter queue. The consumer writes it; the
// dlq tool reads it. It is an SQLite file (the lab's, by default), or a
// PostgreSQL database for consumers on several hosts (a postgres:// URL);
// each backend's schema is defined here once, with a version.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/mattn/go-sqlite3" // database/sql driver "sqlite3"

	"eaimq/internal/linkpath"
)

// EnvPath names the file; DefaultPath is the lab's.
const (
	EnvPath     = "EAI_MQ_DB"
	DefaultPath = "/root/eaimw/mq/processed.db"
)

// Path returns the store's path from getenv, or the default.
func Path(getenv func(string) string) string {
	if p := getenv(EnvPath); p != "" {
		return p
	}
	return DefaultPath
}

// SchemaVersion is PRAGMA user_version of a file this code wrote. Open
// migrates older files up to it and refuses newer ones.
const SchemaVersion = 3

// migrations[v] takes a file from version v to v+1, inside one
// transaction.
var migrations = []func(ctx context.Context, tx *sql.Tx) error{
	migrate1,
	migrate2,
	migrate3,
}

const schema1 = `CREATE TABLE claims (
		message_id  TEXT PRIMARY KEY,
		state       TEXT NOT NULL,            -- inflight | done | failed | dead
		owner       TEXT,                     -- host:pid:start of the process holding it inflight
		lease_until INTEGER,                  -- unix ms; an inflight claim past it is free again
		claim_id    TEXT,
		attempts    INTEGER NOT NULL DEFAULT 0, -- partner calls, all copies
		failures    INTEGER NOT NULL DEFAULT 0, -- transient failures of the current copy
		last_status INTEGER,                  -- last HTTP status, 0 when there was no answer
		last_error  TEXT,                     -- short error or response excerpt
		dead_reason TEXT,                     -- why the last copy was dead-lettered, in a sentence
		updated_at  INTEGER NOT NULL,
		done_at     INTEGER
	) WITHOUT ROWID;
	CREATE TABLE attempts (
		id          INTEGER PRIMARY KEY,
		message_id  TEXT NOT NULL,
		at          INTEGER NOT NULL,         -- unix ms
		redelivered INTEGER NOT NULL,
		status      INTEGER NOT NULL,         -- HTTP status, 0 when there was no answer
		error       TEXT,
		action      TEXT NOT NULL,            -- ack | requeue | dead
		latency_ms  INTEGER NOT NULL
	);
	CREATE INDEX attempts_by_message ON attempts(message_id, id);`

// migrate1 creates the schema. A file that already has a table named
// processed is the lab's consumer.py's dedup file, found at the default path
// because the Go programs replace the Python scripts in place. It is adopted,
// not refused: every message_id in it becomes a delivered record (so none of
// those claims is sent again), and its table is left as it was. Only its
// message_id column is relied on.
func migrate1(ctx context.Context, tx *sql.Tx) error {
	var labTable int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master
		WHERE type = 'table' AND name = 'processed' COLLATE NOCASE`).Scan(&labTable); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, schema1); err != nil {
		return err
	}
	if labTable == 0 {
		// The lab's word for the dedup record, as a view of ours.
		_, err := tx.ExecContext(ctx, `CREATE VIEW processed AS
			SELECT message_id, claim_id, done_at AS processed_at FROM claims WHERE state = 'done'`)
		return err
	}
	now := nowMS()
	_, err := tx.ExecContext(ctx, `INSERT INTO claims (message_id, state, last_error, updated_at, done_at)
		SELECT CAST(message_id AS TEXT), 'done', 'recorded by the lab''s consumer.py', ?, ?
		FROM processed WHERE message_id IS NOT NULL AND CAST(message_id AS TEXT) <> ''
		ON CONFLICT (message_id) DO NOTHING`, now, now)
	if err != nil {
		return fmt.Errorf("adopt the lab's processed table (it needs a message_id column): %w", err)
	}
	return nil
}

// migrate2 adds the recorded reason (the Reason word) to records and
// attempts, so that dlq reads why instead of guessing it.
func migrate2(ctx context.Context, tx *sql.Tx) error {
	for _, q := range []string{
		`ALTER TABLE claims ADD COLUMN reason TEXT`,
		`ALTER TABLE attempts ADD COLUMN reason TEXT`,
		`UPDATE claims SET reason = ` + backfillReason,
		// v1 attempts kept only the action; a dead-letter attempt takes its
		// claim's reason, which is right for the last one and the best
		// there is for older ones.
		`UPDATE attempts SET reason = CASE action
			WHEN 'requeue' THEN 'retry'
			WHEN 'dead' THEN (SELECT c.reason FROM claims c WHERE c.message_id = attempts.message_id AND c.state = 'dead')
			END`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// migrate3 changes no table: version 3 marks a file whose writers keep the
// lock-file protocol of solo mode (see solo), so that a program of version
// 2, which would write in-progress rows that a solo store never reads,
// refuses it.
func migrate3(context.Context, *sql.Tx) error { return nil }

// Store is an open dedup store: the consumer's record of each claim and the
// lock that keeps two consumers from calling the partner with one id at
// once. SQLite (a file, the default) and PostgreSQL (a URL, for consumers on
// several hosts) both implement it, and both pass the same test suite.
type Store interface {
	// Begin takes message id in progress for this holder, unless it is
	// done already, held by another live holder, or (for a redelivered
	// copy) dead-lettered before; see Begun. On SQLite a claim whose
	// holder stops answering is free again after lease; on PostgreSQL a
	// claim lives exactly as long as its holder's session, and lease is
	// not used (see Postgres).
	Begin(ctx context.Context, id, claimID string, fresh bool, lease time.Duration) (Begun, error)
	// Finish records the outcome of a claim this holder took with Begin
	// (or of one decided without a call) and releases it; the caller acts
	// on the outcome it returns, only after it returns.
	Finish(ctx context.Context, id string, a Attempt) (Outcome, error)
	// Get returns the record of id; found is false when there is none.
	Get(ctx context.Context, id string) (rec Record, found bool, err error)
	// Attempts returns the attempt log of id, oldest first.
	Attempts(ctx context.Context, id string) ([]Attempt, error)
	// Prune deletes the done records delivered before olderThan, and
	// their attempt logs, batch records examined per transaction; never
	// a claim in flight, waiting for its retry, or dead-lettered. It
	// returns how many records it deleted (the consumer's --retain).
	Prune(ctx context.Context, olderThan time.Time, batch int) (int, error)
	// Path names the store for messages, without a password.
	Path() string
	// Close waits for pending writes and releases everything held.
	Close() error
}

// Open opens the store that location names: a postgres:// or postgresql://
// URL selects PostgreSQL, anything else is the path of an SQLite file.
func Open(location string, o Options) (Store, error) {
	if isPostgres(location) {
		s, err := OpenPostgres(location, o)
		if err != nil {
			return nil, err // not a nil *Postgres inside a non-nil Store
		}
		return s, nil
	}
	s, err := OpenSQLite(location, o)
	if err != nil {
		return nil, err // not a nil *SQLite inside a non-nil Store
	}
	return s, nil
}

func isPostgres(location string) bool {
	return strings.HasPrefix(location, "postgres://") || strings.HasPrefix(location, "postgresql://")
}

// SQLite is a dedup store in an SQLite file.
type SQLite struct {
	db         *sql.DB
	path       string // as the user named it (EAI_MQ_DB), for messages
	file       string // the regular file it resolves to: SQLite's -wal lives beside it
	owner      string
	durability string     // the wanted durability of outcome records: full or normal
	walSync    bool       // fsync the WAL ourselves for durable writes (full, in WAL mode)
	readOnly   bool       // no writer: Begin and Finish fail
	wal        *os.File   // the WAL, opened for fsync (walFile)
	walMu      sync.Mutex // guards wal's opening

	stmts   stmts
	reads   reads // solo mode's Begin reads outside the writer
	solo    solo
	reqs    chan *request
	stopped chan struct{}
	once    sync.Once
}

// Options tune Open.
type Options struct {
	// Synchronous is SQLite's synchronous setting: "full" (the default)
	// makes every commit survive a power loss before the consumer acks;
	// "normal" survives a process crash only.
	Synchronous string
	// ReadOnly opens an existing file without writing (the dlq tool).
	ReadOnly bool
	// Owner overrides this process's name in in-progress claims (tests
	// stand in for a second process with it).
	Owner string
	// Conns is the most claims the caller holds in progress at once (the
	// consumer's --prefetch); PostgreSQL keeps one connection for each,
	// and two more. 0 means DefaultConns. A Begin beyond it fails rather
	// than wait for a connection. SQLite ignores it.
	Conns int
}

// OpenSQLite opens (creating it, mode 0600, and its directory) the SQLite
// store at path.
func OpenSQLite(path string, o Options) (*SQLite, error) {
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
	if o.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("open dedup store %s: %w", given, err)
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("create directory for %s: %w", path, err)
		}
		// Create it 0600 ourselves: SQLite would use 0644, and the file
		// holds claim ids and partner answers.
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open dedup store %s: %w", path, err)
		}
		f.Close()
	}
	q := url.Values{}
	q.Set("_busy_timeout", "10000")
	q.Set("_txlock", "immediate") // take the write lock at BEGIN: no upgrade deadlocks between processes
	q.Set("_foreign_keys", "1")
	mode := "rw"
	if o.ReadOnly {
		mode = "ro"
	}
	q.Set("mode", mode)
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, fmt.Errorf("open dedup store %s: %w", path, err)
	}
	// One connection: the writer goroutine owns it, and SQLite allows one
	// writer at a time anyway.
	db.SetMaxOpenConns(1)
	if o.Owner == "" {
		o.Owner = Owner()
	}

	s := &SQLite{db: db, path: given, file: path, owner: o.Owner, durability: o.Synchronous, readOnly: o.ReadOnly, reqs: make(chan *request, 256), stopped: make(chan struct{})}
	if err := s.init(o.ReadOnly); err != nil {
		db.Close()
		return nil, fmt.Errorf("dedup store %s: %w", given, err)
	}
	if !o.ReadOnly {
		if err := s.prepare(); err != nil {
			db.Close()
			return nil, fmt.Errorf("dedup store %s: %w", given, err)
		}
		if err := s.openReads(dsn); err != nil {
			db.Close()
			return nil, fmt.Errorf("dedup store %s: %w", given, err)
		}
		go s.writer()
		if err := s.openSolo(); err != nil {
			s.Close()
			return nil, fmt.Errorf("dedup store %s: %w", given, err)
		}
	} else {
		close(s.stopped)
	}
	return s, nil
}

func (s *SQLite) init(readOnly bool) error {
	ctx := context.Background()
	if !readOnly {
		// WAL: readers (dlq list) never block the consumer, and a commit is
		// one append to the log.
		// Small pages for a new file: a commit writes each page it dirtied to
		// the WAL, and a claim's rows are a few dozen bytes. (No effect on
		// an existing file.)
		if _, err := s.db.ExecContext(ctx, "PRAGMA page_size=1024"); err != nil {
			return err
		}
		var mode string
		if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
			return err
		}
		// In WAL mode SQLite commits without fsync and the writer fsyncs the
		// WAL itself, once per group commit (see writer). Where WAL is not available
		// (some network filesystems), SQLite's own synchronous setting does
		// the work, one fsync per commit.
		// Checkpoint (copy the WAL back into the file) every 16 MiB rather
		// than every 1000 pages: a claim's pages are rewritten again and
		// again, and a larger checkpoint writes each of them once.
		if _, err := s.db.ExecContext(ctx, "PRAGMA wal_autocheckpoint=16384"); err != nil {
			return err
		}
		level := "normal"
		if mode == "wal" {
			s.walSync = s.durability == "full"
		} else {
			level = s.durability
		}
		if _, err := s.db.ExecContext(ctx, "PRAGMA synchronous="+level); err != nil {
			return err
		}
	}
	var v int
	if err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("not an SQLite file, or unreadable: %w", err)
	}
	if v > SchemaVersion {
		return fmt.Errorf("schema version %d is newer than this program's %d", v, SchemaVersion)
	}
	if v == SchemaVersion {
		return nil
	}
	if readOnly {
		return fmt.Errorf("schema version %d, want %d (run the consumer once to migrate)", v, SchemaVersion)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// Re-read inside the write lock: another consumer may have migrated.
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return err
	}
	for ; v < SchemaVersion; v++ {
		if err := migrations[v](ctx, tx); err != nil {
			return fmt.Errorf("migrate schema %d→%d: %w", v, v+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, "PRAGMA user_version="+strconv.Itoa(SchemaVersion)); err != nil {
		return err
	}
	return tx.Commit()
}

// Close stops the writer after the pending writes and closes the file.
func (s *SQLite) Close() error {
	s.once.Do(func() {
		s.closeSolo() // the watcher may be writing: before the writer stops
		close(s.reqs)
	})
	<-s.stopped
	if s.reads.db != nil {
		s.reads.db.Close()
	}
	if s.wal != nil {
		s.wal.Close()
	}
	return s.db.Close()
}

// Path is the file's path.
func (s *SQLite) Path() string { return s.path }

// Owner names this holder of in-progress claims: host, pid and the process
// start time (so that a reused pid is not mistaken for it), and a number
// unique to each Open (two stores in one process are two holders).
func Owner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:%s:%d", host, os.Getpid(), startTime(os.Getpid()), openSeq.Add(1))
}

var openSeq atomic.Int64

// startTime is field 22 of /proc/PID/stat (clock ticks since boot), or "".
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// ownerGone reports whether owner is a process on this host that no longer
// runs, so that its in-progress claims can be taken at once rather than
// after the lease (a consumer killed with -9 and started again).
func ownerGone(owner string) bool {
	parts := strings.Split(owner, ":")
	if len(parts) < 3 {
		return false
	}
	host, _ := os.Hostname()
	if parts[0] != host {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		return false
	}
	return startTime(pid) != parts[2]
}

var errClosed = errors.New("dedup store closed")

func nowMS() int64 { return time.Now().UnixMilli() }

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
		return "", fmt.Errorf("not a regular file (%s): set %s to a file path", fi.Mode().Type(), EnvPath)
	}
	return path, nil
}
