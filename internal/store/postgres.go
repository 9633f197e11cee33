package store

import (
	"context"
	"crypto/sha256"
	"eaimq/internal/claim"
	"eaimq/internal/redact"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres is a dedup store in a PostgreSQL database, for consumers on
// several hosts. It keeps the same records as SQLite, with the same
// meaning, and one thing more: the claim a holder has in progress is a
// PostgreSQL advisory lock held by a session of its own.
//
// How the lock works. Begin takes a connection from the pool, runs
// pg_try_advisory_lock on a 64-bit hash of the message_id, and keeps that
// connection (its session) until Finish has committed the outcome and run
// pg_advisory_unlock_all. Another session's Begin finds the lock taken and
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
// was before the previous holder's last commit), and because Finish commits
// before it unlocks.
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
type Postgres struct {
	pool        *pgxpool.Pool
	path        string // the URL without its password, for messages
	owner       string
	readOnly    bool
	maxHeld     int    // claims held at once (Options.Conns)
	beginFinish string // the BEGIN of Finish's transaction, with its durability

	mu     sync.Mutex
	claims map[string]*pgClaim
	held   int // claims held or being taken, each with a connection
	closed bool
}

// pgClaim is one message_id this store is working on or holds.
type pgClaim struct {
	turn chan struct{} // one Begin or Finish of the id at a time in this store
	conn *pgxpool.Conn // the session holding the id's advisory lock, while held (under turn)
	refs int           // operations using or waiting for turn (under Postgres.mu)
	slot bool          // counted in Postgres.held (under turn)
}

// DefaultConns is Options.Conns when it is not set: the consumer's
// default --prefetch.
const DefaultConns = 5

// pgSchemaVersion is the version of a database this code wrote. Open
// migrates older ones up to it and refuses newer ones. It counts on its
// own: the PostgreSQL schema began after SQLite's second version.
const pgSchemaVersion = 1

// pgMigrations[v] takes a database from version v to v+1, inside one
// transaction.
var pgMigrations = []func(ctx context.Context, tx pgx.Tx) error{
	pgMigrate1,
}

// pgMigrate1 creates the schema: the same tables and columns as SQLite's
// version 2, with PostgreSQL's types. There is no lease_until (the lock is
// the session, see Postgres), and owner names the holder for a late
// Finish's check and for people. Times are timestamptz.
func pgMigrate1(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `
	CREATE TABLE claims (
		message_id  text PRIMARY KEY,     -- see pgKey for ids PostgreSQL text cannot hold
		state       text NOT NULL CHECK (state IN ('inflight', 'done', 'failed', 'dead')),
		owner       text,                 -- host:pid:start:open of the store that took it in flight
		claim_id    text,
		attempts    integer NOT NULL DEFAULT 0, -- partner calls, all copies
		failures    integer NOT NULL DEFAULT 0, -- transient failures of the current copy
		last_status integer,              -- last HTTP status, 0 when there was no answer
		last_error  text,                 -- short error or response excerpt
		reason      text,                 -- the Reason word of the last decision
		dead_reason text,                 -- why the last copy was dead-lettered, in a sentence
		updated_at  timestamptz NOT NULL,
		done_at     timestamptz
	);
	CREATE TABLE attempts (
		id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		message_id  text NOT NULL,
		at          timestamptz NOT NULL,
		redelivered boolean NOT NULL,
		status      integer NOT NULL,     -- HTTP status, 0 when there was no answer
		error       text,
		action      text NOT NULL,        -- ack | requeue | dead
		reason      text,                 -- the Reason word
		latency_ms  bigint NOT NULL
	);
	CREATE INDEX attempts_by_message ON attempts (message_id, id);
	CREATE VIEW processed AS
		SELECT message_id, claim_id, done_at AS processed_at FROM claims WHERE state = 'done';`)
	return err
}

// OpenPostgres opens the store in the PostgreSQL database that url names
// (postgres:// or postgresql://, with pgx's parameters), creating or
// migrating its tables. Options.Synchronous "full" commits an outcome
// record with the server's synchronous_commit (made "on" where the server
// has it off); "normal" with synchronous_commit off, which survives a crash
// of the consumer but not of the server. Options.Conns sizes the pool.
func OpenPostgres(location string, o Options) (*Postgres, error) {
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
		o.Owner = Owner()
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
	s := &Postgres{pool: pool, path: path, owner: o.Owner, readOnly: o.ReadOnly, maxHeld: o.Conns, claims: map[string]*pgClaim{}}
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

func (s *Postgres) init(ctx context.Context, o Options) error {
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
	s.beginFinish = "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit TO " + level

	// A pool the server cannot give fails at the Nth claim in flight,
	// mid-run; say so now. (Other clients' connections count too; this
	// catches only what can never work.)
	var room int
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int
		- current_setting('superuser_reserved_connections')::int`).Scan(&room); err != nil {
		return err
	}
	if need := s.maxHeld + 2; !o.ReadOnly && need > room {
		return fmt.Errorf("%d claims in flight (Options.Conns, the consumer's --prefetch) need %d connections; the server allows %d (max_connections)", s.maxHeld, need, room)
	}

	v, err := s.version(ctx, s.pool)
	switch {
	case err != nil:
		return err
	case v > pgSchemaVersion:
		return fmt.Errorf("schema version %d is newer than this program's %d", v, pgSchemaVersion)
	case v == pgSchemaVersion:
		return nil
	case o.ReadOnly:
		return fmt.Errorf("schema version %d, want %d (run the consumer once to migrate)", v, pgSchemaVersion)
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Two consumers starting at once: the second waits here until the
		// first has committed, then finds the schema migrated.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLockKey); err != nil {
			return err
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
			return fmt.Errorf("schema version %d is newer than this program's %d", v, pgSchemaVersion)
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
func (s *Postgres) version(ctx context.Context, q interface {
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

// Advisory lock keys: a hash of a name, so that the schema's lock and each
// claim's are apart. Two ids whose hashes collide (2⁻⁶⁴) wait for each
// other, which costs time, never a claim.
var schemaLockKey = lockKey("eaimq/schema")

func claimLockKey(id string) int64 { return lockKey("eaimq/claim/" + id) }

func lockKey(name string) int64 {
	h := sha256.Sum256([]byte(name))
	return int64(binary.BigEndian.Uint64(h[:8]))
}

var errReadOnly = errors.New("dedup store opened read-only")

// claim waits for this store's turn on id.
func (s *Postgres) claim(ctx context.Context, id string) (*pgClaim, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	c := s.claims[id]
	if c == nil {
		c = &pgClaim{turn: make(chan struct{}, 1)}
		s.claims[id] = c
	}
	c.refs++
	s.mu.Unlock()
	select {
	case c.turn <- struct{}{}:
		return c, nil
	case <-ctx.Done():
		s.mu.Lock()
		c.refs--
		// No one else uses it (refs 0), so reading conn is safe.
		if c.refs == 0 && c.conn == nil {
			delete(s.claims, id)
		}
		s.mu.Unlock()
		return nil, ctx.Err()
	}
}

// unclaim ends this operation's turn on id.
func (s *Postgres) unclaim(id string, c *pgClaim) {
	s.mu.Lock()
	c.refs--
	if c.refs == 0 && c.conn == nil {
		delete(s.claims, id)
	}
	s.mu.Unlock()
	<-c.turn
}

// reserve counts one more claim held, or says there are too many.
func (s *Postgres) reserve(c *pgClaim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held >= s.maxHeld {
		return fmt.Errorf("%d claims in progress at once, the most this store was opened for (Options.Conns)", s.held)
	}
	s.held++
	c.slot = true
	return nil
}

// letGo releases c's session, and with it the lock: unlocked and back to
// the pool when the session is well, closed otherwise (never back to the
// pool holding a lock).
func (s *Postgres) letGo(ctx context.Context, c *pgClaim) {
	if c.conn != nil {
		if _, err := c.conn.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
			closeConn(c.conn)
		}
		c.conn.Release()
		c.conn = nil
	}
	if c.slot {
		s.mu.Lock()
		s.held--
		s.mu.Unlock()
		c.slot = false
	}
}

// unlockAll releases every advisory lock conn's session holds, best
// effort: closing the session releases them anyway, only later.
func unlockAll(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, "SELECT pg_advisory_unlock_all()")
}

// closeConn ends conn's session (the server releases what it held); the
// pool then discards it on Release.
func closeConn(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn.Conn().Close(ctx)
}

// Begin takes message id in progress for this store, unless it is done
// already, dead-lettered before (for a redelivered copy), or held by
// another session: see the Store interface and Postgres for the lock. The
// lease is not used.
func (s *Postgres) Begin(ctx context.Context, id, claimID string, fresh bool, _ time.Duration) (Begun, error) {
	if s.readOnly {
		return Begun{}, errReadOnly
	}
	c, err := s.claim(ctx, id)
	if err != nil {
		return Begun{}, err
	}
	defer s.unclaim(id, c)

	if c.conn != nil {
		// This store holds it already: the lock is its own.
		b, err := s.take(ctx, c.conn, id, claimID, fresh)
		switch {
		case err == nil:
			if b.Result != Acquired {
				s.letGo(ctx, c)
			}
			return b, nil
		case !c.conn.Conn().IsClosed():
			return Begun{}, err
		}
		// Its session ended, and the lock with it: take it anew.
		s.letGo(ctx, c)
	}

	if err := s.reserve(c); err != nil {
		return Begun{}, err
	}
	for try := 0; ; try++ {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			s.letGo(ctx, c)
			return Begun{}, err
		}
		c.conn = conn
		var locked bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, claimLockKey(id)).Scan(&locked); err != nil {
			// A session that died while idle in the pool: try once more
			// on another. Any other failure ends the session, so that no
			// lock it may have taken survives.
			dead := conn.Conn().IsClosed()
			closeConn(conn)
			conn.Release()
			c.conn = nil
			if dead && try == 0 {
				continue
			}
			s.letGo(ctx, c)
			return Begun{}, err
		}
		if !locked {
			conn.Release()
			c.conn = nil
			s.letGo(ctx, c)
			return Begun{Result: Busy}, nil
		}
		break
	}
	b, err := s.take(ctx, c.conn, id, claimID, fresh)
	if err != nil {
		closeConn(c.conn)
		s.letGo(ctx, c)
		return Begun{}, err
	}
	if b.Result != Acquired {
		s.letGo(ctx, c)
	}
	return b, nil
}

// take reads and takes the record of id, the lock being held by conn.
func (s *Postgres) take(ctx context.Context, conn *pgxpool.Conn, id, claimID string, fresh bool) (Begun, error) {
	key := pgKey(id)
	var fails int
	err := conn.QueryRow(ctx, `INSERT INTO claims AS c (message_id, state, owner, claim_id, updated_at)
		VALUES ($1, 'inflight', $2, $3, now())
		ON CONFLICT (message_id) DO UPDATE SET state = 'inflight', owner = $2,
			failures = CASE WHEN $4 THEN 0 ELSE c.failures END,
			claim_id = COALESCE($3, c.claim_id), updated_at = now()
		WHERE c.state <> 'done' AND (c.state <> 'dead' OR $4)
		RETURNING failures`, key, s.owner, pgNullText(claimID), fresh).Scan(&fails)
	if err == nil {
		return Begun{Result: Acquired, Failures: fails}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Begun{}, err
	}
	var state string
	var reason *string
	if err := conn.QueryRow(ctx, `SELECT state, reason FROM claims WHERE message_id = $1`, key).Scan(&state, &reason); err != nil {
		return Begun{}, err
	}
	switch state {
	case "done":
		return Begun{Result: Done}, nil
	case "dead":
		return Begun{Result: DeadBefore, Prior: Outcome{Action: DeadLetter, Reason: parseStoredReason(deref(reason))}}, nil
	}
	return Begun{}, fmt.Errorf("claim %s: state %q not taken", id, state)
}

// Finish records the outcome of id, durably, then releases the claim if
// this store holds it; see the Store interface. When the session that held
// the claim has died before the record's COMMIT was sent, nothing of it was
// committed, and the record is written through another connection, under
// the rules for a late holder. When it dies during the COMMIT, whether the
// record was committed cannot be known: Finish returns the error, and the
// claim stays held until Close.
func (s *Postgres) Finish(ctx context.Context, id string, a Attempt) (Outcome, error) {
	if stateOf(a.Outcome.Action) == "" {
		return a.Outcome, fmt.Errorf("finish %s: no action decided", id)
	}
	if s.readOnly {
		return a.Outcome, errReadOnly
	}
	c, err := s.claim(ctx, id)
	if err != nil {
		return a.Outcome, err
	}
	defer s.unclaim(id, c)

	var out Outcome
	retry := true
	if c.conn != nil {
		out, retry, err = s.record(ctx, c.conn, id, a)
		if err == nil {
			s.letGo(ctx, c)
			return out, nil
		}
		if !c.conn.Conn().IsClosed() {
			return out, err
		}
		// The lock went with the session.
		s.letGo(ctx, c)
	}
	if retry {
		for try := 0; try < 2; try++ {
			out, retry, err = s.record(ctx, s.pool, id, a)
			if err == nil || !retry {
				break
			}
		}
	}
	return out, err
}

// record writes the outcome of id in one transaction through b. retry
// says nothing was committed and the connection failed, so that writing
// it again is safe.
func (s *Postgres) record(ctx context.Context, b interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, id string, a Attempt) (out Outcome, retry bool, err error) {
	out = a.Outcome
	tx, err := b.BeginTx(ctx, pgx.TxOptions{BeginQuery: s.beginFinish})
	if err != nil {
		return out, true, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	out, err = s.recordIn(ctx, tx, id, a)
	if err != nil {
		return out, tx.Conn().IsClosed(), err
	}
	if err := tx.Commit(ctx); err != nil {
		return out, false, err
	}
	return out, false, nil
}

func (s *Postgres) recordIn(ctx context.Context, tx pgx.Tx, id string, a Attempt) (Outcome, error) {
	out := a.Outcome
	state := stateOf(a.Outcome.Action)
	key := pgKey(id)
	called, failed := 0, 0
	if a.Called {
		called = 1
	}
	if stateOf(a.Outcome.Action) == "failed" { // Requeue or Delay: a transient failure
		failed = 1
	}
	reason := a.Outcome.Reason.String()
	errText, detail := pgNullText(a.Error), pgNullText(a.Detail)
	// A done record is never overwritten, and a claim another holder has
	// in progress is not released by a late one, unless this outcome is
	// the acceptance itself.
	finish := func() (bool, error) {
		tag, err := tx.Exec(ctx, `UPDATE claims SET state = $1, owner = NULL,
			attempts = attempts + $2, failures = failures + $3, last_status = $4, last_error = $5, reason = $6,
			dead_reason = CASE WHEN $1 = 'dead' THEN $7 ELSE dead_reason END,
			updated_at = now(), done_at = CASE WHEN $1 = 'done' THEN now() ELSE done_at END
			WHERE message_id = $8 AND state <> 'done'
				AND ($1 = 'done' OR state <> 'inflight' OR owner IS NULL OR owner = $9)`,
			state, called, failed, a.Status, errText, reason, detail, key, s.owner)
		return tag.RowsAffected() == 1, err
	}
	for {
		ok, err := finish()
		if err != nil {
			return out, err
		}
		if ok {
			break
		}
		// Not written: find out why, with the row locked, so that what we
		// read stays true until the commit.
		var cur string
		err = tx.QueryRow(ctx, `SELECT state FROM claims WHERE message_id = $1 FOR UPDATE`, key).Scan(&cur)
		if errors.Is(err, pgx.ErrNoRows) {
			// No Begin (a message without an id, or one that cannot be
			// sent): keep the record anyway. If another inserts it first,
			// look again.
			tag, err := tx.Exec(ctx, `INSERT INTO claims (message_id, state, attempts, failures, last_status,
				last_error, reason, dead_reason, updated_at, done_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), CASE WHEN $2 = 'done' THEN now() END)
				ON CONFLICT (message_id) DO NOTHING`,
				key, state, called, failed, a.Status, errText, reason, detail)
			if err != nil {
				return out, err
			}
			if tag.RowsAffected() == 1 {
				break
			}
			continue
		}
		if err != nil {
			return out, err
		}
		// Locked now: the same rule, on the row as it is.
		if ok, err := finish(); err != nil || ok {
			if err != nil {
				return out, err
			}
			break
		}
		// Done already, or held by another holder: count the call, keep
		// the record.
		if _, err := tx.Exec(ctx, `UPDATE claims SET attempts = attempts + $1, updated_at = now() WHERE message_id = $2`, called, key); err != nil {
			return out, err
		}
		if cur == "done" {
			out = OutDuplicate
		}
		break
	}
	// The log keeps what went wrong, as on SQLite.
	if out.Action == Ack && a.Outcome.Action == Ack {
		return out, nil
	}
	at := a.At
	if at.IsZero() {
		at = time.Now()
	}
	_, err := tx.Exec(ctx, `INSERT INTO attempts (message_id, at, redelivered, status, error, action, reason, latency_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		key, at, a.Redelivered, a.Status, errText, out.Action.String(), out.Reason.String(), a.Latency.Milliseconds())
	return out, err
}

// Get returns the record of id; found is false when there is none.
func (s *Postgres) Get(ctx context.Context, id string) (rec Record, found bool, err error) {
	var claimID, lastErr, dead, reason *string
	var lastStatus *int
	var doneAt *time.Time
	var state string
	err = s.pool.QueryRow(ctx, `SELECT state, claim_id, attempts, failures, last_status,
		last_error, dead_reason, reason, updated_at, done_at FROM claims WHERE message_id = $1`, pgKey(id)).
		Scan(&state, &claimID, &rec.Attempts, &rec.Failures, &lastStatus, &lastErr, &dead, &reason, &rec.UpdatedAt, &doneAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	rec.MessageID = id
	rec.ClaimID, rec.LastError, rec.DeadReason = deref(claimID), deref(lastErr), deref(dead)
	rec.State = claim.ParseState(state)
	rec.Outcome = Outcome{Action: rec.State.Action(), Reason: parseStoredReason(deref(reason))}
	if lastStatus != nil {
		rec.LastStatus = *lastStatus
	}
	if doneAt != nil {
		rec.DoneAt = *doneAt
	}
	return rec, true, nil
}

// Attempts returns the attempt log of id, oldest first.
func (s *Postgres) Attempts(ctx context.Context, id string) ([]Attempt, error) {
	rows, err := s.pool.Query(ctx, `SELECT at, redelivered, status, COALESCE(error, ''), action, COALESCE(reason, ''), latency_ms
		FROM attempts WHERE message_id = $1 ORDER BY id`, pgKey(id))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		var a Attempt
		var lat int64
		var action, reason string
		if err := rows.Scan(&a.At, &a.Redelivered, &a.Status, &a.Error, &action, &reason, &lat); err != nil {
			return nil, err
		}
		a.Outcome = Outcome{Action: parseAction(action), Reason: parseStoredReason(reason)}
		a.Latency, a.Called = time.Duration(lat)*time.Millisecond, a.Status != 0 || a.Error != ""
		out = append(out, a)
	}
	return out, rows.Err()
}

// Path is the database's URL without its password.
func (s *Postgres) Path() string { return s.path }

// Close releases every claim this store holds (ending their sessions, so
// that their locks go at once) and closes the pool. An operation under
// way finishes first.
func (s *Postgres) Close() error {
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

// pgKey is id as PostgreSQL text can hold it, one to one: text must be
// valid UTF-8 without NUL, and an AMQP message_id is any bytes (the
// consumer records an unsendable one under it). Such an id, and any id that
// begins with `\x`, is kept as `\x` and its bytes in hex, as psql shows
// bytea; every other id is itself.
func pgKey(id string) string {
	if utf8.ValidString(id) && !strings.ContainsRune(id, 0) && !strings.HasPrefix(id, `\x`) {
		return id
	}
	return `\x` + hex.EncodeToString([]byte(id))
}

// pgText is s fit for a text column: invalid UTF-8 (a response excerpt cut
// in the middle of a character) and NUL become U+FFFD. It is for what
// people read (errors, sentences, claim ids), never for a key.
func pgText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

func pgNullText(s string) *string {
	if s == "" {
		return nil
	}
	t := pgText(s)
	return &t
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
