package postgres

import (
	"context"
	"eaimq/internal/claim"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Finish records the outcome of id, durably, then releases the claim if
// this store holds it; see the Store interface. When the session that held
// the claim has died before the record's COMMIT was sent, nothing of it was
// committed, and the record is written through another connection, under
// the rules for a late holder. When it dies during the COMMIT, whether the
// record was committed cannot be known: Finish returns the error, and the
// claim stays held until Close.
func (s *Store) Finish(ctx context.Context, id string, a claim.Attempt) (claim.Outcome, error) {
	if a.Outcome.Action.State() == claim.StateNone {
		return a.Outcome, fmt.Errorf("finish %s: no action decided", id)
	}
	if s.readOnly {
		return a.Outcome, errReadOnly
	}
	c, err := s.turn(ctx, id)
	if err != nil {
		return a.Outcome, err
	}
	defer s.endTurn(id, c)

	var out claim.Outcome
	retry := true
	if c.conn != nil {
		out, retry, err = s.recordGrouped(ctx, c, id, a)
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
func (s *Store) record(ctx context.Context, b interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, id string, a claim.Attempt) (out claim.Outcome, retry bool, err error) {
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

// recordGrouped writes the outcome of the claim this store holds through
// its own session and releases the lock (recordHeld); a record not written
// there (not as held any more, or refused) is written by record through
// the same session, and one the session died before committing is left
// to Finish to write through the pool (retry). retry is record's.
func (s *Store) recordGrouped(ctx context.Context, c *pgClaim, id string, a claim.Attempt) (out claim.Outcome, retry bool, err error) {
	res := s.recordHeld(ctx, c, id, a)
	switch {
	case res.written:
		return a.Outcome, false, nil
	case res.sent:
		return a.Outcome, false, res.err // the COMMIT's fate is unknown
	case res.err != nil && c.conn.Conn().IsClosed():
		return a.Outcome, true, res.err // nothing committed
	}
	return s.record(ctx, c.conn, id, a)
}

// recordRes is what became of a held claim's record (recordHeld):
// written in its committed transaction; or not written because the record
// was not as held (written false, err nil); or err, with sent saying
// whether the COMMIT's fate is unknown or nothing was committed.
type recordRes struct {
	written bool
	sent    bool
	err     error
}

// sendAll runs b through conn and returns each statement's tag.
func sendAll(ctx context.Context, conn interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, b *pgx.Batch) ([]pgconn.CommandTag, error) {
	br := conn.SendBatch(ctx, b)
	tags := make([]pgconn.CommandTag, 0, b.Len())
	var err error
	for range b.Len() {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err != nil {
			break
		}
		tags = append(tags, tag)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tags, err
}

// recordHeld writes the outcome of a claim held by c's session, commits
// it and releases the lock, in one round trip and one transaction: a
// pipeline of three statements that the server runs as the one implicit
// transaction it commits at the pipeline's Sync.
//
// The order is the lock's contract: a peer that takes the lock must read
// the record as it is now, so the lock is released only after the record
// is committed. The first statement takes the claim's lock a second time,
// at transaction level (this session holds it already, so it is granted
// at once), and the last releases the session's: the claim stays locked
// by the transaction, and the server releases a transaction's locks only
// after its COMMIT is durable (synchronous_commit) and visible. A record
// the server refuses aborts the transaction before the unlock is run (the
// server skips the rest of the pipeline up to the Sync): the claim stays
// held by the session, for the write through it that follows
// (recordGrouped). The first statement also raises the transaction's
// synchronous_commit to the outcome's (the session's is off, for Begin's
// record): set_config(..., true) is SET LOCAL, in force until the commit,
// which reads it.
//
// This is BEGIN, SET LOCAL, the record, COMMIT and the unlock in one batch
// before, two transactions; measured with the store alone, P=5,
// alternated, the server's CPU per claim and the Finish's time both
// dropped (docs/figures.md, issue 33). The server groups the WAL flushes
// of concurrent COMMITs itself (the holders' sessions commit side by
// side), so a writer of our own grouping them on one connection only added
// a hand-off and the unlock's round trip (PostgreSQL/SQLite 0.57 with it,
// 0.67 without).
func (s *Store) recordHeld(ctx context.Context, c *pgClaim, id string, a claim.Attempt) recordRes {
	key := pgKey(id)
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_try_advisory_xact_lock($1), set_config('synchronous_commit', $2, true)`, LockKey(id), s.syncLevel)
	b.Queue(finishHeld(a), s.finishArgs(key, a)...)
	b.Queue(`SELECT pg_advisory_unlock_all()`)
	tags, err := sendAll(ctx, c.conn, b)
	switch {
	case err == nil:
		c.unlocked = true
		return recordRes{written: tags[1].RowsAffected() == 1}
	case !c.conn.Conn().IsClosed() && len(tags) == 3:
		// The COMMIT failed after the unlock (the one ERROR a COMMIT of
		// this transaction can meet is a deferred constraint's, and the
		// store's tables have none): nothing was committed, and the
		// session no longer holds the claim. It goes; the record is
		// written through the pool, by the rules for a late holder.
		closeConn(c.conn)
		return recordRes{err: err}
	case !c.conn.Conn().IsClosed():
		// The server refused a statement: the transaction was rolled back
		// before the unlock, and the session still holds the claim.
		return recordRes{err: err}
	}
	closeConn(c.conn)
	var pe *pgconn.PgError
	switch {
	case pgconn.SafeToRetry(err):
		return recordRes{err: err} // nothing was sent
	case errors.As(err, &pe) && pe.Severity == "FATAL" && len(tags) == 0:
		// The server ended the session (an operator, a restart) before it
		// answered the first statement: it answers in order, so nothing
		// of the pipeline ran. (pgx meets a session ended while idle this way,
		// when it prepares the pipeline's statements.)
		return recordRes{err: err}
	}
	// The session died with the pipeline sent: whether the COMMIT landed
	// is read from the record. In flight (for this store, or for a peer
	// that took it once our session and lock were gone), it did not: the
	// record leaves that state only by a COMMIT. (Should ours still be
	// running on a server the network lost, it either comes second and
	// matches nothing, or first, and the late holder's write through the
	// pool counts the call twice: a count, never a second call.) With no
	// owner and everything our outcome decides (claim.Finish: state,
	// reason, a lineage no lower, a dead-letter decision's token), it did,
	// or another holder's equal outcome stands for it: at worst a count is
	// short. Anything else is unknown: the caller tries again, and that
	// write (through the pool, by the rule for a late holder) can only
	// raise the lineage, never lose it.
	var state, reason string
	var owner *string
	var lineage int
	var deadToken string
	if rerr := s.pool.QueryRow(ctx, `SELECT state, owner, COALESCE(reason, ''), lineage, dead_token FROM claims WHERE message_id = $1`, key).
		Scan(&state, &owner, &reason, &lineage, &deadToken); rerr != nil {
		return recordRes{sent: true, err: err}
	}
	st := claim.ParseState(state)
	if owner == nil && st == a.Outcome.Action.State() && claim.StoredReason(reason) == a.Outcome.Reason && lineage >= a.Lineage &&
		(st != claim.StateDead || deadToken == a.Token) {
		return recordRes{written: true}
	}
	if st == claim.StateInFlight {
		return recordRes{err: err}
	}
	return recordRes{sent: true, err: err}
}

// finishHeld is the statement that writes the outcome of a claim its
// holder has in flight, and its attempt's line when the log keeps it (in
// one statement: the line only when the record was written).
func finishHeld(a claim.Attempt) string {
	update := `UPDATE claims SET state = $1, owner = NULL,
		attempts = attempts + $2, failures = failures + $3, last_status = $4, last_error = $5, reason = $6,
		dead_reason = CASE WHEN $1 = {dead} THEN $7 ELSE dead_reason END,
		dead_token = CASE WHEN $1 = {dead} THEN $11 ELSE dead_token END,
		updated_at = now(), done_at = CASE WHEN $1 = {done} THEN now() ELSE done_at END,
		lineage = greatest(lineage, $10)
		WHERE message_id = $8 AND state = {inflight} AND owner = $9`
	if !a.Logged(a.Outcome) {
		return claim.SQL(update)
	}
	return claim.SQL(`WITH u AS (` + update + ` RETURNING message_id)
		INSERT INTO attempts (message_id, at, redelivered, status, error, action, reason, latency_ms)
		SELECT message_id, $12, $13, $4, $5, $14, $6, $15 FROM u`)
}

// finishArgs are finishHeld's arguments.
func (s *Store) finishArgs(key string, a claim.Attempt) []any {
	called, failed := a.Counts()
	args := []any{a.Outcome.Action.State().String(), called, failed, a.Status, pgNullText(a.Error),
		a.Outcome.Reason.String(), pgNullText(a.Detail), key, s.owner, a.Lineage, a.Token}
	if !a.Logged(a.Outcome) {
		return args
	}
	at := a.At
	if at.IsZero() {
		at = time.Now()
	}
	return append(args, at, a.Redelivered, a.Outcome.Action.String(), a.Latency.Milliseconds())
}

func (s *Store) recordIn(ctx context.Context, tx querier, id string, a claim.Attempt) (claim.Outcome, error) {
	key := pgKey(id)
	out, err := s.writeOutcome(ctx, tx, key, a)
	if err != nil || !a.Logged(out) {
		// The log keeps what went wrong, as on SQLite.
		return out, err
	}
	at := a.At
	if at.IsZero() {
		at = time.Now()
	}
	_, err = tx.Exec(ctx, `INSERT INTO attempts (message_id, at, redelivered, status, error, action, reason, latency_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		key, at, a.Redelivered, a.Status, pgNullText(a.Error), out.Action.String(), out.Reason.String(), a.Latency.Milliseconds())
	return out, err
}

// writeOutcome writes a's outcome into the record of key, under the rules
// for a late holder, and returns the outcome as recorded.
func (s *Store) writeOutcome(ctx context.Context, tx querier, key string, a claim.Attempt) (claim.Outcome, error) {
	state := a.Outcome.Action.State().String()
	called, failed := a.Counts()
	reason := a.Outcome.Reason.String()
	errText, detail := pgNullText(a.Error), pgNullText(a.Detail)
	// A done record is never overwritten, and neither a claim another
	// holder has in progress nor a dead-letter decision is by a late
	// holder, unless this outcome is the acceptance itself (claim.Finish).
	// (owner = $9 is NULL, not true, for a row nobody holds.)
	finish := func() (bool, error) {
		tag, err := tx.Exec(ctx, claim.SQL(`UPDATE claims SET state = $1, owner = NULL,
			attempts = attempts + $2, failures = failures + $3, last_status = $4, last_error = $5, reason = $6,
			dead_reason = CASE WHEN $1 = {dead} THEN $7 ELSE dead_reason END,
			dead_token = CASE WHEN $1 = {dead} THEN $11 ELSE dead_token END,
			updated_at = now(), done_at = CASE WHEN $1 = {done} THEN now() ELSE done_at END,
			lineage = greatest(lineage, $10)
			WHERE message_id = $8 AND state <> {done}
				AND ($1 = {done} OR owner = $9 OR (state <> {dead} AND (state <> {inflight} OR owner IS NULL)))`),
			state, called, failed, a.Status, errText, reason, detail, key, s.owner, a.Lineage, a.Token)
		return tag.RowsAffected() == 1, err
	}
	for {
		if ok, err := finish(); err != nil || ok {
			return a.Outcome, err
		}
		// Not written: find out why, with the row locked, so that what we
		// read stays true until the commit.
		var cur string
		err := tx.QueryRow(ctx, `SELECT state FROM claims WHERE message_id = $1 FOR UPDATE`, key).Scan(&cur)
		if errors.Is(err, pgx.ErrNoRows) {
			// No Begin (a message without an id, or one that cannot be
			// sent): keep the record anyway. If another inserts it first,
			// look again.
			tag, err := tx.Exec(ctx, claim.SQL(`INSERT INTO claims (message_id, state, attempts, failures, last_status,
				last_error, reason, dead_reason, updated_at, done_at, lineage, dead_token)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), CASE WHEN $2 = {done} THEN now() END, $9,
					CASE WHEN $2 = {dead} THEN $10 ELSE '' END)
				ON CONFLICT (message_id) DO NOTHING`),
				key, state, called, failed, a.Status, errText, reason, detail, a.Lineage, a.Token)
			if err != nil || tag.RowsAffected() == 1 {
				return a.Outcome, err
			}
			continue
		}
		if err != nil {
			return a.Outcome, err
		}
		// Locked now: the same rule, on the row as it is.
		if ok, err := finish(); err != nil || ok {
			return a.Outcome, err
		}
		// Done already, held by another holder, or dead-lettered: count
		// the call, keep the record (claim.Finish).
		if _, err := tx.Exec(ctx, `UPDATE claims SET attempts = attempts + $1, lineage = greatest(lineage, $3), updated_at = now() WHERE message_id = $2`,
			called, key, claim.KeptLineage(claim.ParseState(cur), a)); err != nil {
			return a.Outcome, err
		}
		if claim.ParseState(cur) == claim.StateDone {
			return claim.OutDuplicate, nil
		}
		return a.Outcome, nil
	}
}

// querier runs statements: a transaction, or the connection of one begun
// in a batch.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
