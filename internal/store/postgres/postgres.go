// Package postgres is the dedup store in a PostgreSQL database, for
// consumers on several hosts. It keeps the same records as SQLite, with the same
// meaning, and one thing more: the claim a holder has in progress is a
// PostgreSQL advisory lock held by a session of its own.
//
// How the lock works. Begin takes a connection from the pool, runs
// pg_try_advisory_lock on a 64-bit hash of the message_id, and keeps that
// connection (its session) until Finish has committed the outcome and
// released the lock (recordHeld: the lock passes to Finish's transaction,
// which releases it at its COMMIT). Another session's Begin finds the lock taken and
// answers Busy. The lock lives and dies with the session: a holder killed
// with -9 loses its TCP connection, its backend sees the connection close
// and ends, and PostgreSQL releases the lock at once; a holder whose host
// vanishes is dropped by the server's TCP keepalive (see pgRuntime) about
// 10 s (at most 12 s) after it was last heard from. So no lease is needed,
// and the lease Begin is given is not used: a live holder keeps its claim
// however long its call takes, a dead one releases it at once.
//
// The record and the lock agree because the record is read only after the
// lock is taken, in a statement of its own (a statement's snapshot is taken
// when it starts, so one that also took the lock could see the record as it
// was before the previous holder's last commit), and because Finish's
// transaction holds the lock until its COMMIT is durable and visible.
//
// The session must be the holder's own, from Begin to Finish: a pooler
// between the consumer and the server (PgBouncer) must run in session
// mode, since in transaction mode another client's transactions would run
// in the session that holds the lock.
//
// The limit: the lock is the session, not the process. A holder that is
// alive but has lost its session (the server restarted, the network between
// it and the server broke for longer than the keepalive bound, an operator
// ran pg_terminate_backend) is no longer a holder, and another consumer can
// take the claim while its call is still under way. The partner then sees
// the id twice, with one Idempotency-Key. The late holder's outcome is
// still recorded as on SQLite: its call always, its state only if the
// claim is free or its answer was the acceptance.
package postgres

import (
	"context"
	"eaimq/internal/claim/proc"
	"eaimq/internal/redact"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is a dedup store in a PostgreSQL database.
type Store struct {
	pool        *pgxpool.Pool
	path        string // the URL without its password, for messages
	owner       string
	readOnly    bool
	created     string // what Open created ("": nothing), for Created
	maxHeld     int    // claims held at once (Options.Conns)
	beginFinish string // the BEGIN of Finish's transaction, with its durability
	syncLevel   string // that durability: synchronous_commit for an outcome

	// deltaWrites are the writes to the dead letters since the last
	// compaction of their kept counts (wroteDeadLetters).
	deltaWrites atomic.Int64

	mu     sync.Mutex
	claims map[string]*pgClaim
	held   int // claims held or being taken, each with a connection
	closed bool
}

// pgClaim is one message_id this store is working on or holds.
type pgClaim struct {
	turn     chan struct{} // one Begin or Finish of the id at a time in this store
	conn     *pgxpool.Conn // the session holding the id's advisory lock, while held (under turn)
	refs     int           // operations using or waiting for turn (under Store.mu)
	slot     bool          // counted in Store.held (under turn)
	unlocked bool          // conn's session released the lock already (recordHeld)
}

// Options tune Open.
type Options struct {
	// Synchronous is the durability of an outcome record: "full" (the
	// default) or "normal" (see Open).
	Synchronous string
	// ReadOnly opens an existing database without writing (the dlq tool).
	ReadOnly bool
	// Owner overrides this store's name in in-progress claims (tests stand
	// in for a second process with it); proc.Holder by default.
	Owner string
	// Conns is the most claims the caller holds in progress at once (the
	// consumer's --prefetch); the store keeps one connection for each,
	// and two more. 0 means DefaultConns. A Begin beyond it fails rather
	// than wait for a connection.
	Conns int
	// NoCreate refuses a database without the store's tables (ErrNoStore)
	// rather than create them: a mistyped database name on a server where
	// that database exists would otherwise start an empty store.
	NoCreate bool
}

// DefaultConns is Options.Conns when it is not set: the consumer's
// default --prefetch.
const DefaultConns = 5

// Open opens the store in the PostgreSQL database that url names
// (postgres:// or postgresql://, with pgx's parameters), creating or
// migrating its tables. Options.Synchronous "full" commits an outcome
// record with the server's synchronous_commit (made "on" where the server
// has it off); "normal" with synchronous_commit off, which survives a crash
// of the consumer but not of the server. Options.Conns sizes the pool.
func Open(location string, o Options) (*Store, error) {
	path := redact.URL(location)
	if o.Synchronous == "" {
		o.Synchronous = "full"
	}
	if o.Synchronous != "full" && o.Synchronous != "normal" {
		return nil, fmt.Errorf("synchronous must be full or normal, not %q", o.Synchronous)
	}
	if o.Conns <= 0 {
		o.Conns = DefaultConns
	}
	if o.Owner == "" {
		o.Owner = proc.Holder()
	}
	cfg, err := pgxpool.ParseConfig(location)
	if err != nil {
		return nil, fmt.Errorf("dedup store %s: %w", path, err)
	}
	// One connection for each claim held (its lock's session), and two
	// more, so that reads and outcomes decided without a claim never wait
	// for a call to end.
	cfg.MaxConns = int32(o.Conns + 2)
	cc := cfg.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = 10 * time.Second
	}
	cc.DialFunc = dialer(cc.ConnectTimeout).DialContext
	for k, v := range pgRuntime {
		if _, set := cc.RuntimeParams[k]; !set {
			cc.RuntimeParams[k] = v
		}
	}
	if _, set := cc.RuntimeParams["application_name"]; !set {
		cc.RuntimeParams["application_name"] = "eaimq " + o.Owner
	}
	if o.ReadOnly {
		// The dlq tool reads; the server makes sure of it.
		cc.RuntimeParams["default_transaction_read_only"] = "on"
	}
	// Begin's in-flight record need not wait for the WAL to reach the disk:
	// after a server crash its lock is gone too. Finish raises the level
	// again for the outcome (beginFinish). A SET, not a startup parameter,
	// so that SET LOCAL ... TO DEFAULT would still find the server's value.
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET synchronous_commit TO off")
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*cc.ConnectTimeout+30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("dedup store %s: %w", path, err)
	}
	s := &Store{pool: pool, path: path, owner: o.Owner, readOnly: o.ReadOnly, maxHeld: o.Conns, claims: map[string]*pgClaim{}}
	if err := s.init(ctx, o); err != nil {
		pool.Close()
		return nil, fmt.Errorf("dedup store %s: %w", path, err)
	}
	return s, nil
}

// pgRuntime are the session settings every connection asks for (a URL may
// set others). The server's TCP keepalive and user timeout bound how long
// a holder whose host vanished keeps its lock: keepalive probes start after
// 4 s of silence, every 2 s, and the server drops the connection (and the
// lock) after 3 unanswered probes or 10 s of unacknowledged data: about
// 10 s, at most 12 s. Over a Unix socket they do nothing, and need not: the
// holder is on the server's host, and its death closes the socket.
var pgRuntime = map[string]string{
	"tcp_keepalives_idle":     "4",
	"tcp_keepalives_interval": "2",
	"tcp_keepalives_count":    "3",
	"tcp_user_timeout":        "10000", // ms
}

// dialer is the client's side of the same bound: a store whose server
// vanished notices it in about 10 s, rather than in the 15 minutes of
// TCP's retransmissions, and its Finish fails instead of hanging.
func dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout:         timeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 4 * time.Second, Interval: 2 * time.Second, Count: 3},
		Control:         setUserTimeout(10 * time.Second),
	}
}

func (s *Store) init(ctx context.Context, o Options) error {
	// Finish's durability: the server's own synchronous_commit (it may
	// wait for a standby too), unless that is off; reset_val is the value
	// before AfterConnect's SET.
	var level string
	if err := s.pool.QueryRow(ctx, `SELECT reset_val FROM pg_settings WHERE name = 'synchronous_commit'`).Scan(&level); err != nil {
		return err
	}
	switch {
	case o.Synchronous == "normal":
		level = "off"
	case level == "off" || !validSyncLevel(level):
		level = "on"
	}
	s.syncLevel = level
	s.beginFinish = "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit TO " + level

	// A pool the server cannot give fails at the Nth claim in flight,
	// mid-run; say so now. (Other clients' connections count too; this
	// catches only what can never work.)
	var room int
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int
		- current_setting('superuser_reserved_connections')::int`).Scan(&room); err != nil {
		return err
	}
	if need := s.maxHeld + 3; !o.ReadOnly && need > room {
		return fmt.Errorf("%d claims in flight (Options.Conns, the consumer's --prefetch) need %d connections; the server allows %d (%w)", s.maxHeld, need, room, errTooFewConns)
	}

	v, err := s.version(ctx, s.pool)
	switch {
	case err != nil:
		return err
	case v > pgSchemaVersion:
		return NewerSchemaError{Have: v, Want: pgSchemaVersion}
	case v == pgSchemaVersion:
		return nil
	case o.ReadOnly && v == 0:
		// Not a hint to create one: a reader that finds none has, most
		// likely, been given another database than the consumer's.
		return errors.New("the database has no dedup store (no eaimq_schema table): is EAI_MQ_DB the consumer's?")
	case o.ReadOnly:
		return fmt.Errorf("schema version %d, want %d (run the consumer once to migrate)", v, pgSchemaVersion)
	case v == 0 && o.NoCreate:
		return ErrNoStore
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Two consumers starting at once: the second waits here until the
		// first has committed, then finds the schema migrated.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLockKey); err != nil {
			return err
		}
		// Under the lock, only the consumer that creates the tables sees
		// them missing, and says so (Created).
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('eaimq_schema') IS NOT NULL`).Scan(&exists); err != nil {
			return err
		}
		if !exists && o.NoCreate {
			return ErrNoStore
		}
		if !exists {
			s.created = "the tables of a new store in " + s.path + ", a database that had none"
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS eaimq_schema (
			one     boolean PRIMARY KEY DEFAULT true CHECK (one),
			version integer NOT NULL)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO eaimq_schema (version) VALUES (0) ON CONFLICT DO NOTHING`); err != nil {
			return err
		}
		v, err := s.version(ctx, tx)
		if err != nil {
			return err
		}
		if v > pgSchemaVersion {
			return NewerSchemaError{Have: v, Want: pgSchemaVersion}
		}
		for ; v < pgSchemaVersion; v++ {
			if err := pgMigrations[v](ctx, tx); err != nil {
				return fmt.Errorf("migrate schema %d→%d: %w", v, v+1, err)
			}
		}
		_, err = tx.Exec(ctx, `UPDATE eaimq_schema SET version = $1`, pgSchemaVersion)
		return err
	})
}

// version reads the schema version; 0 for a database without our tables.
func (s *Store) version(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('eaimq_schema') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var v int
	err := q.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM eaimq_schema`).Scan(&v)
	return v, err
}

func validSyncLevel(s string) bool {
	switch s {
	case "on", "off", "local", "remote_write", "remote_apply":
		return true
	}
	return false
}

// Created says what Open created: "" when the store's tables were there
// already.
func (s *Store) Created() string { return s.created }

// Path is the database's URL without its password.
func (s *Store) Path() string { return s.path }

// Close releases every claim this store holds (ending their sessions, so
// that their locks go at once) and closes the pool. An operation under
// way finishes first.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var all []*pgClaim
	for _, c := range s.claims {
		all = append(all, c)
	}
	s.mu.Unlock()
	for _, c := range all {
		c.turn <- struct{}{}
		if c.conn != nil {
			// Unlock first and wait for the answer: a closed session's
			// locks go only once its server process has noticed, a moment
			// after Close returns, and a peer asking at once would still
			// find the claim held.
			unlockAll(c.conn)
			closeConn(c.conn)
		}
		s.letGo(context.Background(), c)
		<-c.turn
	}
	s.pool.Close()
	return nil
}

var (
	errClosed      = errors.New("dedup store closed")
	errReadOnly    = errors.New("dedup store opened read-only")
	errTooFewConns = errors.New("max_connections")
)

// ErrNoStore: Options.NoCreate, and the database has none of the store's
// tables.
var ErrNoStore = errors.New("the database has no dedup store (no eaimq_schema table)")

// NewerSchemaError: the database was written by a newer release, whose
// records this one cannot read right.
type NewerSchemaError struct{ Have, Want int }

func (e NewerSchemaError) Error() string {
	return fmt.Sprintf("schema version %d is newer than this program's %d (run the newer release, or restore the backup taken before it)", e.Have, e.Want)
}
