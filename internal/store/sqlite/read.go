package sqlite

import (
	"context"
	"database/sql"
	"eaimq/internal/claim"
	"errors"
	"strings"
	"time"
)

// recordColumns are what Get and Records read of a claims row, in scan's
// order.
const recordColumns = `message_id, state, claim_id, attempts, failures, last_status,
	last_error, dead_reason, reason, updated_at, done_at`

// scan reads one claims row of recordColumns.
func scan(row interface{ Scan(...any) error }) (rec claim.Record, err error) {
	var claimID, lastErr, dead, reason sql.NullString
	var lastStatus, doneAt sql.NullInt64
	var updated int64
	var state string
	err = row.Scan(&rec.MessageID, &state, &claimID, &rec.Attempts, &rec.Failures, &lastStatus, &lastErr, &dead, &reason, &updated, &doneAt)
	if err != nil {
		return claim.Record{}, err
	}
	rec.ClaimID, rec.LastError, rec.DeadReason = claimID.String, lastErr.String, dead.String
	rec.State = claim.ParseState(state)
	rec.Outcome = claim.Outcome{Action: rec.State.Action(), Reason: claim.StoredReason(reason.String)}
	rec.LastStatus = int(lastStatus.Int64)
	rec.UpdatedAt = time.UnixMilli(updated)
	if doneAt.Valid {
		rec.DoneAt = time.UnixMilli(doneAt.Int64)
	}
	return rec, nil
}

// Get returns the record of id; found is false when there is none.
func (s *Store) Get(ctx context.Context, id string) (rec claim.Record, found bool, err error) {
	rec, err = scan(s.db.QueryRowContext(ctx, `SELECT `+recordColumns+` FROM claims WHERE message_id = ?`, id))
	found = err == nil
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	if err != nil {
		return claim.Record{}, false, err
	}
	rec, found = s.withHeld(id, rec, found)
	return rec, found, nil
}

// withHeld is rec (found or not) as a claim held in memory by this solo
// store shows it: in progress, in memory, not in the file.
func (s *Store) withHeld(id string, rec claim.Record, found bool) (claim.Record, bool) {
	c, held := s.soloHeld(id)
	if !held {
		return rec, found
	}
	if !found {
		rec = claim.Record{MessageID: id, ClaimID: c.claimID, UpdatedAt: time.Now()}
	}
	rec.State, rec.Failures = claim.StateInFlight, c.failures
	rec.Outcome = claim.Outcome{Action: claim.NoAction, Reason: rec.Outcome.Reason}
	return rec, true
}

// recordsChunk bounds the ids of one query of Records (SQLite's limit on
// a statement's parameters is far above it).
const recordsChunk = 500

// Records returns the records of ids that exist, by id: Get for many ids
// in a few queries.
func (s *Store) Records(ctx context.Context, ids []string) (map[string]claim.Record, error) {
	out := make(map[string]claim.Record, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), recordsChunk)]
		ids = ids[len(chunk):]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := s.queryRecords(ctx, args)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			rec, err := scan(rows)
			if err != nil {
				rows.Close()
				return nil, err
			}
			out[rec.MessageID] = rec
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		for _, id := range chunk {
			rec, found := out[id]
			if rec, found = s.withHeld(id, rec, found); found {
				out[id] = rec
			}
		}
	}
	return out, nil
}

// queryRecords runs the query of Records for one chunk. The statement of a
// full chunk is prepared once: parsing and planning 500 placeholders at
// every chunk was 2.2 s of dlq's 5.4 s over 100,000 dead letters. (A
// single JSON-array parameter would need no placeholders, but a message
// id need not be valid UTF-8, and JSON would change it.)
func (s *Store) queryRecords(ctx context.Context, args []any) (*sql.Rows, error) {
	q := `SELECT ` + recordColumns + ` FROM claims WHERE message_id IN (?` + strings.Repeat(",?", len(args)-1) + `)`
	if len(args) < recordsChunk {
		return s.db.QueryContext(ctx, q, args...)
	}
	s.records.Lock()
	defer s.records.Unlock()
	if s.records.full == nil {
		st, err := s.db.PrepareContext(ctx, q)
		if err != nil {
			return nil, err
		}
		s.records.full = st
	}
	return s.records.full.QueryContext(ctx, args...)
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
