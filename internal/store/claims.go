package store

import (
	"context"
	"database/sql"
	"errors"
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
// Durability: SQLite commits with synchronous=NORMAL (WAL frames written,
// not fsynced), and for the durable requests of a batch the writer then
// fdatasyncs the WAL itself before it answers them. An in-progress claim
// (not durable: a lease lost to a power cut is harmless, its holder died
// with it) is answered at its commit. Whatever arrives while the fsync
// runs waits for it and goes into the next batch, so one fsync covers
// every record committed while the previous one ran.
//
// The fsync is the writer's own, in line, rather than handed to syncer
// goroutines that overlap it with the next commit (the design before). On
// two shared cores next to the broker and the partner, the overlapped
// fsyncs made none finish sooner (the device flushes them one after the
// other) and each covered fewer records: a drain at prefetch 5 went from
// 0.75 fsyncs per claim to 0.50 in line (perf stat, alternated runs), for
// the same CPU per claim, and its rate rose (630-778 to 695-926 claims/s,
// BenchmarkConsumerVsBare alternated). The store benchmarked alone at P=5
// is slower in line (BenchmarkBeginFinish: 620-695 to 713-1020 µs a
// claim): with nothing else on the cores, overlapping costs nothing.
func (s *SQLite) writer() {
	defer close(s.stopped)
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
		s.commit(batch)
	}
}

// commit runs batch in one transaction, makes its durable requests
// durable, and answers every request.
func (s *SQLite) commit(batch []*request) {
	if err := s.runTx(batch); err != nil && len(batch) > 1 {
		// One request failed and took the batch with it: run each alone,
		// so that the others are not punished for it.
		for _, r := range batch {
			s.commit([]*request{r})
		}
		return
	} else if err != nil {
		batch[0].done <- err
		return
	}
	var durable []*request
	for _, r := range batch {
		if r.durable && s.walSync {
			durable = append(durable, r)
		} else {
			r.done <- nil
		}
	}
	if len(durable) == 0 {
		return
	}
	// This fsync starts after the batch's commit, so it covers it.
	err := s.syncWAL()
	for _, r := range durable {
		r.done <- err
	}
}

// syncWAL fsyncs the WAL file. fsync works on the file, not the descriptor,
// so our own read-only descriptor flushes what SQLite wrote through its own.
func (s *SQLite) syncWAL() error {
	wal, err := s.walFile()
	if err != nil {
		return err
	}
	if err := datasync(wal); err != nil {
		return fmt.Errorf("fdatasync WAL: %w", err)
	}
	return nil
}

// walFile opens the WAL for fsync, once.
func (s *SQLite) walFile() (*os.File, error) {
	s.walMu.Lock()
	defer s.walMu.Unlock()
	if s.wal == nil {
		f, err := os.Open(s.file + "-wal")
		if err != nil {
			return nil, fmt.Errorf("open WAL for fsync: %w", err)
		}
		// The WAL file may be new: make its directory entry durable too,
		// once, or a power cut could take the whole file with it.
		if d, err := os.Open(filepath.Dir(s.file)); err == nil {
			d.Sync()
			d.Close()
		}
		s.wal = f
	}
	return s.wal, nil
}

func (s *SQLite) runTx(batch []*request) error {
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
func (s *SQLite) write(ctx context.Context, durable bool, fn func(tx *sql.Tx) error) (err error) {
	if s.readOnly {
		return errReadOnly
	}
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

// Begin takes message id in progress for this process for lease, unless it
// is done already or another live process holds it. fresh says the delivery
// is not a redelivery: a fresh copy starts its failure count from zero, so a
// republished or replayed claim gets its one retry again, and a fresh copy
// of a dead-lettered claim is tried again (that is what a replay is for),
// while a redelivered one is not (DeadBefore).
func (s *SQLite) Begin(ctx context.Context, id, claimID string, fresh bool, lease time.Duration) (b Begun, err error) {
	if s.readOnly {
		return Begun{}, errReadOnly
	}
	if b, ok, err := s.soloBegin(ctx, id, claimID, fresh, lease); ok {
		return b, err
	}
	err = s.write(ctx, false, func(tx *sql.Tx) error {
		now := nowMS()
		// The common case, an id never seen, in one statement.
		r, err := tx.Stmt(s.stmts.insertNew).Exec(id, s.owner, now+lease.Milliseconds(), nullable(claimID), now)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 1 {
			b = Begun{Result: Acquired}
			return nil
		}
		var state, owner, reason sql.NullString
		var leaseUntil sql.NullInt64
		var fails int
		if err := tx.Stmt(s.stmts.selectClaim).QueryRow(id).Scan(&state, &owner, &leaseUntil, &fails, &reason); err != nil {
			return err
		}
		switch {
		case state.String == "done":
			b = Begun{Result: Done}
			return nil
		case state.String == "dead" && !fresh:
			b = Begun{Result: DeadBefore, Prior: Outcome{Action: DeadLetter, Reason: parseStoredReason(reason.String)}}
			return nil
		case state.String == "inflight" && owner.String != s.owner && leaseUntil.Int64 > now && !ownerGone(owner.String):
			b = Begun{Result: Busy}
			return nil
		}
		if fresh {
			fails = 0
		}
		b = Begun{Result: Acquired, Failures: fails}
		_, err = tx.Stmt(s.stmts.takeClaim).Exec(s.owner, now+lease.Milliseconds(), fails, nullable(claimID), now, id)
		return err
	})
	return b, err
}

// Finish records the outcome of the claim this process holds and releases
// it: Ack makes it done (the dedup record), Requeue counts a transient
// failure, DeadLetter records why it goes to the dead-letter queue. The
// caller acts on the delivery only after Finish returns, and acts on the
// outcome Finish returns, which is a.Outcome except in one case: the record
// says the claim was delivered meanwhile (another holder took it after this
// one's lease ran out), and then it is OutDuplicate, since a done record is
// never overwritten.
//
// A holder that lost its claim to another live process records its
// attempt but leaves the record to the new holder, unless the partner
// accepted the claim: acceptance is the truth whoever heard it.
func (s *SQLite) Finish(ctx context.Context, id string, a Attempt) (Outcome, error) {
	out := a.Outcome
	state := stateOf(a.Outcome.Action)
	if state == "" {
		return out, fmt.Errorf("finish %s: no action decided", id)
	}
	if s.readOnly {
		return out, errReadOnly
	}
	if out, ok, err := s.soloFinish(ctx, id, a, state); ok {
		return out, err
	}
	f := finishArgs(a, state)
	called, failed, reason := f.called, f.failed, f.reason
	err := s.write(ctx, true, func(tx *sql.Tx) error {
		out = a.Outcome
		now := nowMS()
		var doneAt any
		if state == "done" {
			doneAt = now
		}
		res, err := tx.Stmt(s.stmts.finish).Exec(state, called, failed, a.Status, nullable(a.Error), reason,
			state, nullable(a.Detail), now, doneAt, id, state, s.owner)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var cur sql.NullString
			err := tx.QueryRow(`SELECT state FROM claims WHERE message_id = ?`, id).Scan(&cur)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				// No Begin (a message without an id, or one that cannot
				// be sent): keep the record anyway.
				if _, err := tx.Exec(`INSERT INTO claims (message_id, state, attempts, failures, last_status, last_error, reason, dead_reason, updated_at, done_at)
					VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, id, state, called, failed, a.Status, nullable(a.Error), reason, nullable(a.Detail), now, doneAt); err != nil {
					return err
				}
			case err != nil:
				return err
			default:
				// Done already, or held by another process: count the
				// call, keep the record.
				if _, err := tx.Exec(`UPDATE claims SET attempts = attempts + ?, updated_at = ? WHERE message_id = ?`, called, now, id); err != nil {
					return err
				}
				if cur.String == "done" {
					out = OutDuplicate
				}
			}
		}
		return s.logAttempt(tx, id, a, out)
	})
	return out, err
}

// finished is what a Finish adds to a record.
type finished struct {
	called, failed int // a call to count; a transient failure to count
	reason         string
}

func finishArgs(a Attempt, state string) finished {
	f := finished{reason: a.Outcome.Reason.String()}
	if a.Called {
		f.called = 1
	}
	if state == "failed" { // Requeue or Delay: a transient failure
		f.failed = 1
	}
	return f
}

// logAttempt writes a's line in the attempt log, as out was recorded.
// The log keeps what went wrong: every failed call and every dead-letter
// decision. A success is fully told by the claims row (status, time,
// attempt count), and writing it again would double the pages each
// delivered claim dirties.
func (s *SQLite) logAttempt(tx *sql.Tx, id string, a Attempt, out Outcome) error {
	if out.Action == Ack && a.Outcome.Action == Ack {
		return nil
	}
	at := a.At
	if at.IsZero() {
		at = time.Now()
	}
	_, err := tx.Stmt(s.stmts.insertAttempt).Exec(id, at.UnixMilli(), a.Redelivered, a.Status, nullable(a.Error),
		out.Action.String(), out.Reason.String(), a.Latency.Milliseconds())
	return err
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
	upsert, writeDown                                        *sql.Stmt // solo mode
}

// reads are solo mode's: Begin reads a record on a connection of its own,
// without waiting for the writer (WAL: a reader sees every commit made
// before it began, and never blocks the writer).
type reads struct {
	db          *sql.DB
	selectClaim *sql.Stmt
}

func (s *SQLite) openReads(dsn string) error {
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return err
	}
	db.SetMaxIdleConns(4)
	st, err := db.Prepare(`SELECT state, owner, lease_until, failures, reason FROM claims WHERE message_id = ?`)
	if err != nil {
		db.Close()
		return fmt.Errorf("prepare: %w", err)
	}
	s.reads = reads{db: db, selectClaim: st}
	return nil
}

func (s *SQLite) prepare() error {
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&s.stmts.insertNew, `INSERT INTO claims (message_id, state, owner, lease_until, claim_id, updated_at)
			VALUES (?, 'inflight', ?, ?, ?, ?) ON CONFLICT (message_id) DO NOTHING`},
		{&s.stmts.selectClaim, `SELECT state, owner, lease_until, failures, reason FROM claims WHERE message_id = ?`},
		{&s.stmts.takeClaim, `UPDATE claims SET state = 'inflight', owner = ?, lease_until = ?, failures = ?,
			claim_id = COALESCE(?, claim_id), updated_at = ? WHERE message_id = ?`},
		// A done record is never overwritten, and a claim another process
		// holds now is not released by a late holder, unless this one's
		// outcome is the acceptance itself.
		{&s.stmts.finish, `UPDATE claims SET state = ?, owner = NULL, lease_until = NULL,
			attempts = attempts + ?, failures = failures + ?, last_status = ?, last_error = ?, reason = ?,
			dead_reason = CASE WHEN ? = 'dead' THEN ? ELSE dead_reason END,
			updated_at = ?, done_at = COALESCE(?, done_at)
			WHERE message_id = ? AND state <> 'done'
				AND (? = 'done' OR state <> 'inflight' OR owner IS NULL OR owner = ?)`},
		// Solo mode's Finish: the whole record in one statement. A done
		// record is never overwritten; failures is the count Begin read
		// plus this one (?5 is NULL for a claim not held: the count on
		// record).
		{&s.stmts.upsert, `INSERT INTO claims (message_id, state, claim_id, attempts, failures, last_status, last_error,
				reason, dead_reason, updated_at, done_at)
			VALUES (?1, ?2, ?3, ?4, COALESCE(?5, 0) + ?6, ?7, ?8, ?9, CASE WHEN ?2 = 'dead' THEN ?10 END, ?11, ?12)
			ON CONFLICT (message_id) DO UPDATE SET state = ?2, owner = NULL, lease_until = NULL,
				claim_id = COALESCE(?3, claim_id), attempts = attempts + ?4, failures = COALESCE(?5, failures) + ?6,
				last_status = ?7, last_error = ?8, reason = ?9,
				dead_reason = CASE WHEN ?2 = 'dead' THEN ?10 ELSE dead_reason END,
				updated_at = ?11, done_at = COALESCE(?12, done_at)
			WHERE state <> 'done'`},
		// Leaving solo mode: a claim held in memory becomes the row Begin
		// would have written.
		{&s.stmts.writeDown, `INSERT INTO claims (message_id, state, owner, lease_until, failures, claim_id, updated_at)
			VALUES (?1, 'inflight', ?2, ?3, ?4, ?5, ?6)
			ON CONFLICT (message_id) DO UPDATE SET state = 'inflight', owner = ?2, lease_until = ?3, failures = ?4,
				claim_id = COALESCE(?5, claim_id), updated_at = ?6
			WHERE state <> 'done'`},
		{&s.stmts.insertAttempt, `INSERT INTO attempts (message_id, at, redelivered, status, error, action, reason, latency_ms)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`},
	} {
		st, err := s.db.Prepare(p.sql)
		if err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		*p.dst = st
	}
	return nil
}
