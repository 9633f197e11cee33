package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retention: the consumer's --retain. A delivered claim's record is what
// keeps its redelivered or republished copy from reaching the partner
// twice, so it is kept as long as a copy can plausibly come back (the
// retention period), then deleted with its attempt log. Only done records
// go: a claim in flight, one that failed and waits for its retry, and a
// dead-lettered one (whose reason dlq shows, and whose redelivered copy
// must be rejected again) are never pruned, whatever their age.
//
// Both backends walk the table in key order, batch keys per transaction,
// so that no transaction holds the store for long (on SQLite the writer
// interleaves the claims' records between the batches) and no index on
// done_at is needed: an index would cost every claim one more write, and
// pruning is rare.

// DefaultPruneBatch is the number of records Prune looks at per
// transaction when it is given no batch.
const DefaultPruneBatch = 500

// Prune deletes the done records (delivered, and duplicates of delivered
// claims) whose delivery is older than olderThan, and their attempt logs,
// batch records examined per transaction. It returns how many records it
// deleted. It stops early, with ctx's error, when ctx ends.
func (s *SQLite) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if s.readOnly {
		return 0, errReadOnly
	}
	if batch <= 0 {
		batch = DefaultPruneBatch
	}
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
			if _, err := tx.Exec(`DELETE FROM attempts WHERE message_id IN (SELECT message_id FROM claims
				WHERE message_id > ? AND message_id <= ? AND state = 'done' AND done_at < ?)`, after, hi.String, cutoff); err != nil {
				return err
			}
			r, err := tx.Exec(`DELETE FROM claims WHERE message_id > ? AND message_id <= ? AND state = 'done' AND done_at < ?`,
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

// Prune deletes the done records older than olderThan and their attempt
// logs, batch records examined per transaction; see SQLite.Prune. A record
// whose claim lock another session holds (a consumer's Begin reading it
// right now) is left for the next run: the lock is the claim, here too.
func (s *Postgres) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if s.readOnly {
		return 0, errReadOnly
	}
	if batch <= 0 {
		batch = DefaultPruneBatch
	}
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
			rows, err := tx.Query(ctx, `SELECT message_id FROM claims
				WHERE message_id > $1 AND message_id <= $2 AND state = 'done' AND done_at < $3`, after, *hi, olderThan)
			if err != nil {
				return err
			}
			keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil || len(keys) == 0 {
				return err
			}
			locks := make([]int64, len(keys))
			for i, k := range keys {
				locks[i] = claimLockKey(pgID(k))
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
			tag, err := tx.Exec(ctx, `DELETE FROM claims WHERE message_id = ANY($1) AND state = 'done' AND done_at < $2`, keys, olderThan)
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

// ParseAge reads a retention period: a Go duration ("36h", "90m") or a
// number of days with the suffix d ("90d"). "" and "0" mean keep forever
// (0).
func ParseAge(s string) (time.Duration, error) {
	if s == "" || s == "0" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || !(n > 0 && n <= 36500) {
			return 0, fmt.Errorf("%q: want a number of days from 1 to 36500 (90d) or a duration (36h)", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("%q: want a number of days (90d) or a duration of at least 1s (36h)", s)
	}
	return d, nil
}

// Retain prunes the records of claims delivered more than age ago, at
// once and then every tenth of age (at least a second, at most an hour),
// until ctx ends, logging what it deleted. The returned channel is closed
// when it has stopped: the caller closes the store after that.
func Retain(ctx context.Context, s Store, age time.Duration, log *slog.Logger) <-chan struct{} {
	stopped := make(chan struct{})
	every := min(max(age/10, time.Second), time.Hour)
	go func() {
		defer close(stopped)
		for {
			n, err := s.Prune(ctx, time.Now().Add(-age), DefaultPruneBatch)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				log.Warn("retention: prune failed; trying again later", "err", err)
			case n > 0:
				log.Info("retention: pruned the records of delivered claims", "records", n, "older_than", age.String())
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
		}
	}()
	return stopped
}
