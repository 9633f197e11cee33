package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"eaimq/internal/claim"
)

// Begin takes message id in progress for this process for lease, unless it
// is done already, another live process holds it, it was dead-lettered
// before (for a redelivered copy), or the step of copy c was carried out
// already: claim.Begin decides from what the record says. A solo store reads the record and holds the claim
// in memory (solo.go); a shared one writes the in-progress row another
// process reads.
func (s *Store) Begin(ctx context.Context, id string, c claim.Copy, lease time.Duration) (b claim.Begun, err error) {
	if s.readOnly {
		return claim.Begun{}, errReadOnly
	}
	if b, ok, err := s.soloBegin(ctx, id, c, lease); ok {
		return b, err
	}
	err = s.write(ctx, false, func(tx *sql.Tx) error {
		now := nowMS()
		// The common case, an id never seen, in one statement.
		r, err := tx.Stmt(s.stmts.insertNew).Exec(id, s.owner, now+lease.Milliseconds(), nullable(c.ClaimID), now)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 1 {
			b = claim.Begin(claim.Found{}, c)
			return nil
		}
		f, err := s.found(tx.Stmt(s.stmts.selectClaim).QueryRow(id), now)
		if err != nil {
			return err
		}
		if b = claim.Begin(f, c); b.Result != claim.Acquired {
			return nil
		}
		_, err = tx.Stmt(s.stmts.takeClaim).Exec(s.owner, now+lease.Milliseconds(), b.Failures, nullable(c.ClaimID), now, b.Restart, id)
		return err
	})
	return b, err
}

// found reads a claims row (selectClaim's columns) as claim.Begin sees it:
// a claim in flight is held elsewhere (claim.HeldElsewhere) when another
// holder has it, and that holder is live: its lease has not run out, and
// Liveness does not say its process is gone.
func (s *Store) found(row *sql.Row, now int64) (claim.Found, error) {
	var state, owner, reason sql.NullString
	var leaseUntil sql.NullInt64
	var r claim.Stored
	if err := row.Scan(&state, &owner, &leaseUntil, &r.Failures, &reason, &r.Lineage, &r.DeadToken); err != nil {
		return claim.Found{}, err
	}
	r.State, r.Reason, r.Holder = claim.ParseState(state.String), claim.StoredReason(reason.String), owner.String
	// Liveness is asked only of a holder that could hold it elsewhere: it
	// reads /proc.
	h := claim.Holding{Holder: s.owner}
	live := leaseUntil.Int64 > now && claim.HeldElsewhere(r, h, true) && !s.liveness.Gone(r.Holder)
	return r.Found(claim.HeldElsewhere(r, h, live)), nil
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
func (s *Store) Finish(ctx context.Context, id string, a claim.Attempt) (claim.Outcome, error) {
	state := a.Outcome.Action.State()
	if state == claim.StateNone {
		return a.Outcome, fmt.Errorf("finish %s: no action decided", id)
	}
	if s.readOnly {
		return a.Outcome, errReadOnly
	}
	if out, ok, err := s.soloFinish(ctx, id, a, state); ok {
		return out, err
	}
	out := a.Outcome
	called, failed := a.Counts()
	err := s.write(ctx, true, func(tx *sql.Tx) error {
		out = a.Outcome
		now := nowMS()
		st := state.String()
		res, err := tx.Stmt(s.stmts.finish).Exec(st, called, failed, a.Status, nullable(a.Error), a.Outcome.Reason.String(),
			st, nullable(a.Detail), st, a.Token, now, doneAt(state, now), a.Lineage, id, st, s.owner)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			if out, err = s.notFinished(tx, id, a, state, now); err != nil {
				return err
			}
		}
		return s.logAttempt(tx, id, a, out)
	})
	return out, err
}

// notFinished records a's outcome when the finish statement changed no row:
// there was no Begin (a message without an id, or one that cannot be sent),
// or the claim is done already or held by another process.
func (s *Store) notFinished(tx *sql.Tx, id string, a claim.Attempt, state claim.State, now int64) (claim.Outcome, error) {
	called, failed := a.Counts()
	var cur sql.NullString
	err := tx.QueryRow(`SELECT state FROM claims WHERE message_id = ?`, id).Scan(&cur)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// Keep the record anyway.
		_, err := tx.Exec(`INSERT INTO claims (message_id, state, attempts, failures, last_status, last_error, reason, dead_reason, updated_at, done_at, lineage, dead_token)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, id, state.String(), called, failed, a.Status, nullable(a.Error),
			a.Outcome.Reason.String(), nullable(a.Detail), now, doneAt(state, now), a.Lineage, deadToken(a))
		return a.Outcome, err
	case err != nil:
		return a.Outcome, err
	}
	// Done already, held by another process, or dead-lettered: count the
	// call, keep the record (claim.Finish).
	if _, err := tx.Exec(`UPDATE claims SET attempts = attempts + ?, lineage = max(lineage, ?), updated_at = ? WHERE message_id = ?`,
		called, claim.KeptLineage(claim.ParseState(cur.String), a), now, id); err != nil {
		return a.Outcome, err
	}
	if claim.ParseState(cur.String) == claim.StateDone {
		return claim.OutDuplicate, nil
	}
	return a.Outcome, nil
}

// deadToken is what a record in a's outcome keeps as its dead-lettered
// copy's token (claim.Found.DeadToken): a's for a dead-letter decision.
func deadToken(a claim.Attempt) string {
	if a.Outcome.Action == claim.DeadLetter {
		return a.Token
	}
	return ""
}

// doneAt is the delivery time a record in state gets: now for a delivered
// one, none (NULL: the time on record stays) otherwise.
func doneAt(state claim.State, now int64) any {
	if state == claim.StateDone {
		return now
	}
	return nil
}

// logAttempt writes a's line in the attempt log, as out was recorded (see
// claim.Attempt.Logged for what the log keeps).
func (s *Store) logAttempt(tx *sql.Tx, id string, a claim.Attempt, out claim.Outcome) error {
	if !a.Logged(out) {
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

// stmts are the writer's statements, prepared once: parsing SQL for every
// claim costs more than running it.
type stmts struct {
	insertNew, selectClaim, takeClaim, finish, insertAttempt *sql.Stmt
	upsert, writeDown                                        *sql.Stmt // solo mode
}

// selectClaim is what Begin reads of a record (see found).
const selectClaim = `SELECT state, owner, lease_until, failures, reason, lineage, dead_token FROM claims WHERE message_id = ?`

// statements are the writer's, by where prepare puts them. The states are
// spelt through claim.SQL.
func (s *Store) statements() []struct {
	dst **sql.Stmt
	sql string
} {
	return []struct {
		dst **sql.Stmt
		sql string
	}{
		{&s.stmts.insertNew, `INSERT INTO claims (message_id, state, owner, lease_until, claim_id, updated_at)
			VALUES (?, {inflight}, ?, ?, ?, ?) ON CONFLICT (message_id) DO NOTHING`},
		{&s.stmts.selectClaim, selectClaim},
		// A first try of a fresh copy (Restart) starts the lineage over.
		{&s.stmts.takeClaim, `UPDATE claims SET state = {inflight}, owner = ?, lease_until = ?, failures = ?,
			claim_id = COALESCE(?, claim_id), updated_at = ?, lineage = CASE WHEN ? THEN 0 ELSE lineage END WHERE message_id = ?`},
		// A done record is never overwritten, and neither a claim another
		// process holds now nor a dead-letter decision is by a late holder,
		// unless this one's outcome is the acceptance itself
		// (claim.Finish). (owner = ? is NULL, not true, for a row nobody
		// holds.)
		{&s.stmts.finish, `UPDATE claims SET state = ?, owner = NULL, lease_until = NULL,
			attempts = attempts + ?, failures = failures + ?, last_status = ?, last_error = ?, reason = ?,
			dead_reason = CASE WHEN ? = {dead} THEN ? ELSE dead_reason END,
			dead_token = CASE WHEN ? = {dead} THEN ? ELSE dead_token END,
			updated_at = ?, done_at = COALESCE(?, done_at), lineage = max(lineage, ?)
			WHERE message_id = ? AND state <> {done}
				AND (? = {done} OR owner = ? OR (state <> {dead} AND (state <> {inflight} OR owner IS NULL)))`},
		// Solo mode's Finish: the whole record in one statement. A done
		// record is never overwritten, nor a claim another holder has in
		// flight (a row left by a store that shared the file and died),
		// nor a dead-letter decision, unless this store holds it (?16) or
		// this outcome is the acceptance; failures is the count Begin read
		// plus this one (?5 is NULL for a claim not held: the count on
		// record); the lineage
		// starts over for a claim Begin restarted (?14), and rises to this
		// outcome's (?13); a dead-letter decision keeps its copy's token
		// (?15).
		{&s.stmts.upsert, `INSERT INTO claims (message_id, state, claim_id, attempts, failures, last_status, last_error,
				reason, dead_reason, updated_at, done_at, lineage, dead_token)
			VALUES (?1, ?2, ?3, ?4, COALESCE(?5, 0) + ?6, ?7, ?8, ?9, CASE WHEN ?2 = {dead} THEN ?10 END, ?11, ?12, ?13,
				CASE WHEN ?2 = {dead} THEN ?15 ELSE '' END)
			ON CONFLICT (message_id) DO UPDATE SET state = ?2, owner = NULL, lease_until = NULL,
				claim_id = COALESCE(?3, claim_id), attempts = attempts + ?4, failures = COALESCE(?5, failures) + ?6,
				last_status = ?7, last_error = ?8, reason = ?9,
				dead_reason = CASE WHEN ?2 = {dead} THEN ?10 ELSE dead_reason END,
				dead_token = CASE WHEN ?2 = {dead} THEN ?15 ELSE dead_token END,
				updated_at = ?11, done_at = COALESCE(?12, done_at),
				lineage = max(CASE WHEN ?14 THEN 0 ELSE lineage END, ?13)
			WHERE state <> {done}
				AND (?16 OR ?2 = {done} OR owner = ?17 OR (state <> {dead} AND (state <> {inflight} OR owner IS NULL)))`},
		// Leaving solo mode: a claim held in memory becomes the row Begin
		// would have written.
		{&s.stmts.writeDown, `INSERT INTO claims (message_id, state, owner, lease_until, failures, claim_id, updated_at)
			VALUES (?1, {inflight}, ?2, ?3, ?4, ?5, ?6)
			ON CONFLICT (message_id) DO UPDATE SET state = {inflight}, owner = ?2, lease_until = ?3, failures = ?4,
				claim_id = COALESCE(?5, claim_id), updated_at = ?6, lineage = CASE WHEN ?7 THEN 0 ELSE lineage END
			WHERE state <> {done}`},
		{&s.stmts.insertAttempt, `INSERT INTO attempts (message_id, at, redelivered, status, error, action, reason, latency_ms)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`},
	}
}

func (s *Store) prepare() error {
	for _, p := range s.statements() {
		st, err := s.db.Prepare(claim.SQL(p.sql))
		if err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		*p.dst = st
	}
	return nil
}

// reads are solo mode's: Begin reads a record on a connection of its own,
// without waiting for the writer (WAL: a reader sees every commit made
// before it began, and never blocks the writer).
type reads struct {
	db          *sql.DB
	selectClaim *sql.Stmt
}

func (s *Store) openReads(dsn string) error {
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return err
	}
	db.SetMaxIdleConns(4)
	st, err := db.Prepare(selectClaim)
	if err != nil {
		db.Close()
		return fmt.Errorf("prepare: %w", err)
	}
	s.reads = reads{db: db, selectClaim: st}
	return nil
}
