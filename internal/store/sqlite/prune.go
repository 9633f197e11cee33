package sqlite

import (
	"context"
	"database/sql"
	"time"

	"eaimq/internal/claim"
)

// Prune deletes the done records (delivered, and duplicates of delivered
// claims) whose delivery is older than olderThan, and their attempt logs,
// batch records examined per transaction; never a claim in flight, waiting
// for its retry, or dead-lettered. It returns how many records it deleted,
// and stops early, with ctx's error, when ctx ends.
//
// It walks the table in key order, batch keys per transaction, so that
// the writer interleaves the claims' own records between the batches, and
// no index on done_at is needed: an index would cost every claim one more
// write, and pruning is rare.
func (s *Store) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if s.readOnly {
		return 0, errReadOnly
	}
	batch = max(batch, 1) // the caller's (store.PruneBatch)
	cutoff := olderThan.UnixMilli()
	after, total := "", 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var hi sql.NullString
		var n int64
		// Not durable: a deletion lost to a power cut is pruned again.
		err := s.write(ctx, false, func(tx *sql.Tx) error {
			if err := tx.QueryRow(`SELECT max(message_id) FROM (SELECT message_id FROM claims
				WHERE message_id > ? ORDER BY message_id LIMIT ?)`, after, batch).Scan(&hi); err != nil || !hi.Valid {
				return err
			}
			if _, err := tx.Exec(claim.SQL(`DELETE FROM attempts WHERE message_id IN (SELECT message_id FROM claims
				WHERE message_id > ? AND message_id <= ? AND state = {done} AND done_at < ?)`), after, hi.String, cutoff); err != nil {
				return err
			}
			r, err := tx.Exec(claim.SQL(`DELETE FROM claims WHERE message_id > ? AND message_id <= ? AND state = {done} AND done_at < ?`),
				after, hi.String, cutoff)
			if err != nil {
				return err
			}
			n, err = r.RowsAffected()
			return err
		})
		if err != nil {
			return total, err
		}
		total += int(n)
		if !hi.Valid {
			return total, nil
		}
		after = hi.String
	}
}
