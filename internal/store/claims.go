package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// request is one write for the writer goroutine.
type request struct {
	fn      func(tx *sql.Tx) error
	durable bool // must survive a power loss before the caller goes on
	done    chan error
}

// writer is the only goroutine that writes. It takes every request that is
// waiting and commits them in one transaction (group commit): with P
// deliveries in flight, one commit carries the records of many.
//
// Durability is pipelined. SQLite commits with synchronous=NORMAL (WAL
// frames written, not fsynced), and a second goroutine, the syncer, fsyncs
// the WAL file for every durable request whose commit has happened, many
// at once. So the writer commits batch k+1 while batch k's fsync runs, an
// in-progress claim (not durable: a lease lost to a power cut is harmless,
// its holder died with it) never waits behind an fsync, and an outcome
// record is answered only after an fsync that started after its commit.
func (s *Store) writer() {
	defer close(s.stopped)
	syncq := make(chan []chan error, 1024)
	syncerDone := make(chan struct{})
	go s.syncer(syncq, syncerDone)
	defer func() {
		close(syncq)
		<-syncerDone
	}()
	batch := make([]*request, 0, 128)
	for r := range s.reqs {
		batch = append(batch[:0], r)
	more:
		for len(batch) < cap(batch) {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		s.commit(batch, syncq)
	}
}

func (s *Store) commit(batch []*request, syncq chan<- []chan error) {
	if err := s.runTx(batch); err != nil && len(batch) > 1 {
		// One request failed and took the batch with it: run each alone,
		// so that the others are not punished for it.
		for _, r := range batch {
			s.commit([]*request{r}, syncq)
		}
		return
	} else if err != nil {
		batch[0].done <- err
		return
	}
	var waiting []chan error
	for _, r := range batch {
		if r.durable && s.walSync {
			waiting = append(waiting, r.done)
		} else {
			r.done <- nil
		}
	}
	if len(waiting) > 0 {
		syncq <- waiting
	}
}

// syncer fsyncs the WAL for every group of durable requests waiting, then
// answers them: one fsync for all the commits made before it started.
func (s *Store) syncer(q <-chan []chan error, done chan<- struct{}) {
	defer close(done)
	for group := range q {
	more:
		for {
			select {
			case g, ok := <-q:
				if !ok {
					break more
				}
				group = append(group, g...)
			default:
				break more
			}
		}
		err := s.syncWAL()
		for _, c := range group {
			c <- err
		}
	}
}

// syncWAL fsyncs the WAL file. fsync works on the file, not the descriptor,
// so our own read-only descriptor flushes what SQLite wrote through its own.
func (s *Store) syncWAL() error {
	if s.wal == nil {
		f, err := os.Open(s.path + "-wal")
		if err != nil {
			return fmt.Errorf("open WAL for fsync: %w", err)
		}
		// The WAL file may be new: make its directory entry durable too,
		// once, or a power cut could take the whole file with it.
		if d, err := os.Open(filepath.Dir(s.path)); err == nil {
			d.Sync()
			d.Close()
		}
		s.wal = f
	}
	if err := s.wal.Sync(); err != nil {
		return fmt.Errorf("fsync WAL: %w", err)
	}
	return nil
}

func (s *Store) runTx(batch []*request) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	for _, r := range batch {
		if err := r.fn(tx); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

// write runs fn in the writer's next transaction and waits for the commit.
func (s *Store) write(ctx context.Context, durable bool, fn func(tx *sql.Tx) error) (err error) {
	r := &request{fn: fn, durable: durable, done: make(chan error, 1)}
	defer func() {
		if recover() != nil { // send on the closed channel: Close was called
			err = errClosed
		}
	}()
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once queued, wait for the commit even if ctx ends: the caller must
	// know whether its record is in the file before it acks or not.
	return <-r.done
}

// BeginResult is what Begin found.
type BeginResult int

const (
	// Acquired: this process holds the claim; call the partner, then Finish.
	Acquired BeginResult = iota
	// Duplicate: the claim was delivered already; ack without calling.
	Duplicate
	// Busy: another live process holds it in progress; wait and ask again.
	Busy
)

func (b BeginResult) String() string {
	return [...]string{"acquired", "duplicate", "busy"}[b]
}

// Begin takes message id in progress for this process for lease, unless it
// is done already or another live process holds it. fresh says the delivery
// is not a redelivery: a fresh copy starts its failure count from zero, so a
// republished claim gets its one retry again. It returns how many transient
// failures of the current copy are on record.
func (s *Store) Begin(ctx context.Context, id, claimID string, fresh bool, lease time.Duration) (res BeginResult, failures int, err error) {
	err = s.write(ctx, false, func(tx *sql.Tx) error {
		now := nowMS()
		// The common case, an id never seen, in one statement.
		r, err := tx.Stmt(s.stmts.insertNew).Exec(id, s.owner, now+lease.Milliseconds(), nullable(claimID), now)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 1 {
			res, failures = Acquired, 0
			return nil
		}
		var state, owner sql.NullString
		var leaseUntil sql.NullInt64
		var fails int
		if err := tx.Stmt(s.stmts.selectClaim).QueryRow(id).Scan(&state, &owner, &leaseUntil, &fails); err != nil {
			return err
		}
		switch {
		case state.String == "done":
			res = Duplicate
			return nil
		case state.String == "inflight" && owner.String != s.owner && leaseUntil.Int64 > now && !ownerGone(owner.String):
			res = Busy
			return nil
		}
		if fresh {
			fails = 0
		}
		res, failures = Acquired, fails
		_, err = tx.Stmt(s.stmts.takeClaim).Exec(s.owner, now+lease.Milliseconds(), fails, nullable(claimID), now, id)
		return err
	})
	return res, failures, err
}

// Attempt is one call to the partner, or one decision without a call.
type Attempt struct {
	At          time.Time
	Redelivered bool
	Status      int    // HTTP status; 0 when there was no answer
	Error       string // short error or response excerpt
	Action      string // ack | requeue | dead
	Latency     time.Duration
	Called      bool // the partner was called (counts as an attempt)
}

// Finish records the outcome of the claim this process holds and releases
// it: "ack" makes it done (the dedup record), "requeue" counts a transient
// failure, "dead" records why it goes to the dead-letter queue. The caller
// acks or rejects the delivery only after Finish returns nil.
func (s *Store) Finish(ctx context.Context, id string, a Attempt, deadReason string) error {
	return s.write(ctx, true, func(tx *sql.Tx) error {
		now := nowMS()
		called := 0
		if a.Called {
			called = 1
		}
		failed := 0
		if a.Action == "requeue" {
			failed = 1
		}
		state := map[string]string{"ack": "done", "requeue": "failed", "dead": "dead"}[a.Action]
		if state == "" {
			return fmt.Errorf("unknown action %q", a.Action)
		}
		var doneAt any
		if state == "done" {
			doneAt = now
		}
		res, err := tx.Stmt(s.stmts.finish).Exec(state, called, failed, a.Status, nullable(a.Error), state, nullable(deadReason), now, doneAt, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			// No Begin (a message without an id): keep the record anyway.
			if _, err := tx.Exec(`INSERT INTO claims (message_id, state, attempts, failures, last_status, last_error, dead_reason, updated_at, done_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, id, state, called, failed, a.Status, nullable(a.Error), nullable(deadReason), now, doneAt); err != nil {
				return err
			}
		}
		// The log keeps what went wrong: every failed call and every
		// dead-letter decision. A success is fully told by the claims row
		// (status, time, attempt count), and writing it again would double
		// the pages each delivered claim dirties.
		if a.Action == "ack" {
			return nil
		}
		at := a.At
		if at.IsZero() {
			at = time.Now()
		}
		_, err = tx.Stmt(s.stmts.insertAttempt).Exec(id, at.UnixMilli(), a.Redelivered, a.Status, nullable(a.Error), a.Action, a.Latency.Milliseconds())
		return err
	})
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// stmts are the writer's statements, prepared once: parsing SQL for every
// claim costs more than running it.
type stmts struct {
	insertNew, selectClaim, takeClaim, finish, insertAttempt *sql.Stmt
}

func (s *Store) prepare() error {
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&s.stmts.insertNew, `INSERT INTO claims (message_id, state, owner, lease_until, claim_id, updated_at)
			VALUES (?, 'inflight', ?, ?, ?, ?) ON CONFLICT (message_id) DO NOTHING`},
		{&s.stmts.selectClaim, `SELECT state, owner, lease_until, failures FROM claims WHERE message_id = ?`},
		{&s.stmts.takeClaim, `UPDATE claims SET state = 'inflight', owner = ?, lease_until = ?, failures = ?,
			claim_id = COALESCE(?, claim_id), updated_at = ? WHERE message_id = ?`},
		{&s.stmts.finish, `UPDATE claims SET state = ?, owner = NULL, lease_until = NULL,
			attempts = attempts + ?, failures = failures + ?, last_status = ?, last_error = ?,
			dead_reason = CASE WHEN ? = 'dead' THEN ? ELSE dead_reason END,
			updated_at = ?, done_at = COALESCE(?, done_at) WHERE message_id = ?`},
		{&s.stmts.insertAttempt, `INSERT INTO attempts (message_id, at, redelivered, status, error, action, latency_ms)
			VALUES (?, ?, ?, ?, ?, ?, ?)`},
	} {
		st, err := s.db.Prepare(p.sql)
		if err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		*p.dst = st
	}
	return nil
}
