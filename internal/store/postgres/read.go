package postgres

import (
	"context"
	"eaimq/internal/claim"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Get returns the record of id; found is false when there is none.
func (s *Store) Get(ctx context.Context, id string) (rec claim.Record, found bool, err error) {
	var claimID, lastErr, dead, reason *string
	var lastStatus *int
	var doneAt *time.Time
	var state string
	err = s.pool.QueryRow(ctx, `SELECT state, claim_id, attempts, failures, last_status,
		last_error, dead_reason, reason, updated_at, done_at FROM claims WHERE message_id = $1`, pgKey(id)).
		Scan(&state, &claimID, &rec.Attempts, &rec.Failures, &lastStatus, &lastErr, &dead, &reason, &rec.UpdatedAt, &doneAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return claim.Record{}, false, nil
	}
	if err != nil {
		return claim.Record{}, false, err
	}
	rec.MessageID = id
	rec.ClaimID, rec.LastError, rec.DeadReason = deref(claimID), deref(lastErr), deref(dead)
	rec.State = claim.ParseState(state)
	rec.Outcome = claim.Outcome{Action: rec.State.Action(), Reason: claim.StoredReason(deref(reason))}
	if lastStatus != nil {
		rec.LastStatus = *lastStatus
	}
	if doneAt != nil {
		rec.DoneAt = *doneAt
	}
	return rec, true, nil
}

// Attempts returns the attempt log of id, oldest first.
func (s *Store) Attempts(ctx context.Context, id string) ([]claim.Attempt, error) {
	rows, err := s.pool.Query(ctx, `SELECT at, redelivered, status, COALESCE(error, ''), action, COALESCE(reason, ''), latency_ms
		FROM attempts WHERE message_id = $1 ORDER BY id`, pgKey(id))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []claim.Attempt
	for rows.Next() {
		var a claim.Attempt
		var lat int64
		var action, reason string
		if err := rows.Scan(&a.At, &a.Redelivered, &a.Status, &a.Error, &action, &reason, &lat); err != nil {
			return nil, err
		}
		a.Outcome = claim.Outcome{Action: claim.ParseAction(action), Reason: claim.StoredReason(reason)}
		a.Latency, a.Called = time.Duration(lat)*time.Millisecond, a.Status != 0 || a.Error != ""
		out = append(out, a)
	}
	return out, rows.Err()
}
