package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// request is one write for the writer goroutine.
type request struct {
	fn   func(tx *sql.Tx) error
	done chan error
}

// writer is the only goroutine that writes. It takes every request that is
// waiting and commits them in one transaction (group commit): with P
// deliveries in flight the fsync of one commit is shared by up to P records,
// so the dedup store keeps up with a concurrent consumer without ever
// answering a caller before its record is committed.
func (s *Store) writer() {
	defer close(s.stopped)
	batch := make([]*request, 0, 64)
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

func (s *Store) commit(batch []*request) {
	err := s.runTx(batch)
	if err == nil {
		for _, r := range batch {
			r.done <- nil
		}
		return
	}
	if len(batch) == 1 {
		batch[0].done <- err
		return
	}
	// One request failed and took the batch with it: run each alone, so
	// that the others are not punished for it.
	for _, r := range batch {
		r.done <- s.runTx([]*request{r})
	}
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
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	r := &request{fn: fn, done: make(chan error, 1)}
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
	err = s.write(ctx, func(tx *sql.Tx) error {
		var state, owner sql.NullString
		var leaseUntil sql.NullInt64
		var fails int
		err := tx.QueryRow(`SELECT state, owner, lease_until, failures FROM claims WHERE message_id = ?`, id).
			Scan(&state, &owner, &leaseUntil, &fails)
		now := nowMS()
		switch {
		case errors.Is(err, sql.ErrNoRows):
			res, failures = Acquired, 0
			_, err = tx.Exec(`INSERT INTO claims (message_id, state, owner, lease_until, claim_id, updated_at)
				VALUES (?, 'inflight', ?, ?, ?, ?)`, id, s.owner, now+lease.Milliseconds(), nullable(claimID), now)
			return err
		case err != nil:
			return err
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
		_, err = tx.Exec(`UPDATE claims SET state = 'inflight', owner = ?, lease_until = ?, failures = ?,
			claim_id = COALESCE(?, claim_id), updated_at = ? WHERE message_id = ?`,
			s.owner, now+lease.Milliseconds(), fails, nullable(claimID), now, id)
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
	return s.write(ctx, func(tx *sql.Tx) error {
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
		res, err := tx.Exec(`UPDATE claims SET state = ?, owner = NULL, lease_until = NULL,
			attempts = attempts + ?, failures = failures + ?, last_status = ?, last_error = ?,
			dead_reason = CASE WHEN ? = 'dead' THEN ? ELSE dead_reason END,
			updated_at = ?, done_at = COALESCE(?, done_at) WHERE message_id = ?`,
			state, called, failed, a.Status, nullable(a.Error), state, nullable(deadReason), now, doneAt, id)
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
		if !a.Called && a.Action != "dead" {
			return nil
		}
		at := a.At
		if at.IsZero() {
			at = time.Now()
		}
		_, err = tx.Exec(`INSERT INTO attempts (message_id, at, redelivered, status, error, action, latency_ms)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, id, at.UnixMilli(), a.Redelivered, a.Status, nullable(a.Error), a.Action, a.Latency.Milliseconds())
		return err
	})
}

// Release gives up a claim this process holds without an outcome (the
// consumer is stopping before it called the partner), so that the
// redelivered copy can be taken at once.
func (s *Store) Release(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`UPDATE claims SET state = 'pending',
			owner = NULL, lease_until = NULL, updated_at = ? WHERE message_id = ? AND state = 'inflight' AND owner = ?`,
			nowMS(), id, s.owner)
		return err
	})
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
