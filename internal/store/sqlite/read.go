package sqlite

import (
	"context"
	"database/sql"
	"eaimq/internal/claim"
	"errors"
	"time"
)

// Get returns the record of id; found is false when there is none.
func (s *Store) Get(ctx context.Context, id string) (rec claim.Record, found bool, err error) {
	var claimID, lastErr, dead, reason sql.NullString
	var lastStatus, doneAt sql.NullInt64
	var updated int64
	var state string
	err = s.db.QueryRowContext(ctx, `SELECT message_id, state, claim_id, attempts, failures, last_status,
		last_error, dead_reason, reason, updated_at, done_at FROM claims WHERE message_id = ?`, id).
		Scan(&rec.MessageID, &state, &claimID, &rec.Attempts, &rec.Failures, &lastStatus, &lastErr, &dead, &reason, &updated, &doneAt)
	found = err == nil
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	if err != nil {
		return claim.Record{}, false, err
	}
	if c, held := s.soloHeld(id); held {
		// In progress in this solo store: in memory, not in the file.
		if !found {
			rec = claim.Record{MessageID: id, ClaimID: c.claimID, UpdatedAt: time.Now()}
		}
		rec.State, rec.Failures = claim.StateInFlight, c.failures
		rec.Outcome = claim.Outcome{Action: claim.NoAction, Reason: claim.StoredReason(reason.String)}
		return rec, true, nil
	}
	if !found {
		return claim.Record{}, false, nil
	}
	rec.ClaimID, rec.LastError, rec.DeadReason = claimID.String, lastErr.String, dead.String
	rec.State = claim.ParseState(state)
	rec.Outcome = claim.Outcome{Action: rec.State.Action(), Reason: claim.StoredReason(reason.String)}
	rec.LastStatus = int(lastStatus.Int64)
	rec.UpdatedAt = time.UnixMilli(updated)
	if doneAt.Valid {
		rec.DoneAt = time.UnixMilli(doneAt.Int64)
	}
	return rec, true, nil
}

// Attempts returns the attempt log of id, oldest first.
func (s *Store) Attempts(ctx context.Context, id string) ([]claim.Attempt, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT at, redelivered, status, COALESCE(error, ''), action, COALESCE(reason, ''), latency_ms
		FROM attempts WHERE message_id = ? ORDER BY id`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []claim.Attempt
	for rows.Next() {
		var a claim.Attempt
		var at, lat int64
		var action, reason string
		if err := rows.Scan(&at, &a.Redelivered, &a.Status, &a.Error, &action, &reason, &lat); err != nil {
			return nil, err
		}
		a.Outcome = claim.Outcome{Action: claim.ParseAction(action), Reason: claim.StoredReason(reason)}
		a.At, a.Latency, a.Called = time.UnixMilli(at), time.Duration(lat)*time.Millisecond, a.Status != 0 || a.Error != ""
		out = append(out, a)
	}
	return out, rows.Err()
}
