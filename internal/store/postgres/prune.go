package postgres

import (
	"context"
	"eaimq/internal/claim"
	"encoding/hex"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Prune deletes the done records older than olderThan and their attempt
// logs, batch records examined per transaction; as the SQLite store does (sqlite.Store.Prune). A record
// whose claim lock another session holds (a consumer's Begin reading it
// right now) is left for the next run: the lock is the claim, here too.
func (s *Store) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if s.readOnly {
		return 0, errReadOnly
	}
	batch = max(batch, 1) // the caller's (store.PruneBatch)
	after, total := "", 0
	for {
		var hi *string
		var n int64
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			// Deletions need not wait for the disk: one lost to a crash is
			// pruned again (the session's synchronous_commit is off).
			if err := tx.QueryRow(ctx, `SELECT max(message_id) FROM (SELECT message_id FROM claims
				WHERE message_id > $1 ORDER BY message_id LIMIT $2) k`, after, batch).Scan(&hi); err != nil || hi == nil {
				return err
			}
			rows, err := tx.Query(ctx, claim.SQL(`SELECT message_id FROM claims
				WHERE message_id > $1 AND message_id <= $2 AND state = {done} AND done_at < $3`), after, *hi, olderThan)
			if err != nil {
				return err
			}
			keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil || len(keys) == 0 {
				return err
			}
			locks := make([]int64, len(keys))
			for i, k := range keys {
				locks[i] = LockKey(pgID(k))
			}
			// Each key whose claim lock this transaction gets (held to its
			// end) is no one else's: Begin reads a record only under it.
			rows, err = tx.Query(ctx, `SELECT k FROM unnest($1::text[], $2::bigint[]) AS u(k, l)
				WHERE pg_try_advisory_xact_lock(l)`, keys, locks)
			if err != nil {
				return err
			}
			if keys, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(keys) == 0 {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM attempts WHERE message_id = ANY($1)`, keys); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, claim.SQL(`DELETE FROM claims WHERE message_id = ANY($1) AND state = {done} AND done_at < $2`), keys, olderThan)
			n = tag.RowsAffected()
			return err
		})
		if err != nil {
			return total, err
		}
		total += int(n)
		if hi == nil {
			return total, nil
		}
		after = *hi
	}
}

// pgID is the message_id that pgKey stored as key.
func pgID(key string) string {
	if hexed, ok := strings.CutPrefix(key, `\x`); ok {
		if b, err := hex.DecodeString(hexed); err == nil {
			return string(b)
		}
	}
	return key
}
