package postgres

import (
	"context"
	"eaimq/internal/claim"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// recordColumns are what Get and Records read of a claims row, in scan's
// order.
const recordColumns = `message_id, state, claim_id, attempts, failures, last_status,
	last_error, dead_reason, reason, updated_at, done_at`

// scan reads one claims row of recordColumns; MessageID is the id the key
// stands for (pgID).
func scan(row pgx.Row) (rec claim.Record, err error) {
	var claimID, lastErr, dead, reason *string
	var lastStatus *int
	var doneAt *time.Time
	var key, state string
	err = row.Scan(&key, &state, &claimID, &rec.Attempts, &rec.Failures, &lastStatus, &lastErr, &dead, &reason, &rec.UpdatedAt, &doneAt)
	if err != nil {
		return claim.Record{}, err
	}
	rec.MessageID = pgID(key)
	rec.ClaimID, rec.LastError, rec.DeadReason = deref(claimID), deref(lastErr), deref(dead)
	rec.State = claim.ParseState(state)
	rec.Outcome = claim.Outcome{Action: rec.State.Action(), Reason: claim.StoredReason(deref(reason))}
	if lastStatus != nil {
		rec.LastStatus = *lastStatus
	}
	if doneAt != nil {
		rec.DoneAt = *doneAt
	}
	return rec, nil
}

// Get returns the record of id; found is false when there is none.
func (s *Store) Get(ctx context.Context, id string) (rec claim.Record, found bool, err error) {
	rec, err = scan(s.pool.QueryRow(ctx, `SELECT `+recordColumns+` FROM claims WHERE message_id = $1`, pgKey(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return claim.Record{}, false, nil
	}
	if err != nil {
		return claim.Record{}, false, err
	}
	rec.MessageID = id
	return rec, true, nil
}

// Records returns the records of ids that exist, by id: Get for many ids
// in one query.
func (s *Store) Records(ctx context.Context, ids []string) (map[string]claim.Record, error) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = pgKey(id)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+recordColumns+` FROM claims WHERE message_id = ANY($1)`, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]claim.Record, len(ids))
	for rows.Next() {
		rec, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out[rec.MessageID] = rec
	}
	return out, rows.Err()
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
