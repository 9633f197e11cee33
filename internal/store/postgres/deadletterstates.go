package postgres

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"eaimq/internal/store/deadletter"
)

// pgMigrate5 adds what became of each ingested dead letter, as SQLite's
// version 7 does (deadletter.State), with the same index, and the words
// of each body (deadletter.Words) that -text narrows by: an array column
// with a GIN index (its pending list takes a row's words at once, where
// a table of words costs a B-tree entry a word, several times the rate).
// The rows there already get theirs here.
func pgMigrate5(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `
	ALTER TABLE dead_letters ADD COLUMN state text NOT NULL DEFAULT 'dead'; -- dead | replaying | replayed | purged
	ALTER TABLE dead_letters ADD COLUMN state_by text NOT NULL DEFAULT '';
	ALTER TABLE dead_letters ADD COLUMN state_via text NOT NULL DEFAULT '';
	ALTER TABLE dead_letters ADD COLUMN state_at timestamptz;              -- NULL: never changed
	ALTER TABLE dead_letters ADD COLUMN words text[] NOT NULL DEFAULT '{}'; -- deadletter.Words of the body
	CREATE INDEX dead_letters_state ON dead_letters(state, seq);
	CREATE INDEX dead_letters_words ON dead_letters USING gin (words);`)
	if err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `SELECT seq, body FROM dead_letters`)
	if err != nil {
		return err
	}
	var b pgx.Batch
	for rows.Next() {
		var seq int64
		var body []byte
		if err := rows.Scan(&seq, &body); err != nil {
			rows.Close()
			return err
		}
		b.Queue(`UPDATE dead_letters SET words = $1 WHERE seq = $2`, pgWords(body), seq)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, &b).Close()
}

// pgWords are body's words as PostgreSQL text holds them.
func pgWords(body []byte) []string {
	ws := deadletter.Words(body)
	for i, w := range ws {
		ws[i] = pgText(w)
	}
	return ws
}

// pgTextCond narrows to the rows whose words hold each of words (cut as
// the index keeps them), or that had more words than it keeps.
func pgTextCond(words []string, arg func(any) string) string {
	ws := make([]string, len(words))
	for i, w := range words {
		ws[i] = pgText(deadletter.IndexWord(w))
	}
	return "(words @> " + arg(ws) + "::text[] OR words @> " + arg([]string{deadletter.AllWords}) + "::text[])"
}

// pgMigrate6 adds the index that the page's groups are counted by
// (deadletter.GroupsSQL), as SQLite's version 8: the columns of a group,
// with dead_at and seq included so that the count is an index-only scan
// (the table's visibility map set, as autovacuum leaves it).
func pgMigrate6(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE INDEX dead_letters_groups ON dead_letters(state, reason, status, broker_reason) INCLUDE (dead_at, seq)`)
	return err
}

// pgStateOf is r's state and its time as the table keeps them: a new row
// is dead, never changed.
func pgStateOf(r deadletter.Row) (string, *time.Time) {
	state := r.State
	if state == "" {
		state = deadletter.StateDead
	}
	if r.StateAt.IsZero() {
		return string(state), nil
	}
	return string(state), &r.StateAt
}

func pgDollar(n int) string { return "$" + strconv.Itoa(n) }

func pgTime(t time.Time) any { return t }

// LastDeadLetterSeq is the largest seq (0: none).
func (s *Store) LastDeadLetterSeq(ctx context.Context) (int64, error) {
	var n *int64
	if err := s.pool.QueryRow(ctx, `SELECT max(seq) FROM dead_letters`).Scan(&n); err != nil || n == nil {
		return 0, err
	}
	return *n, nil
}

// ChangeDeadLetters applies c in one statement, committed with the
// durability of an outcome record (beginFinish): a replay publishes only
// after its claim is committed, and marks a row replayed only after the
// broker's confirm. Under READ COMMITTED an UPDATE that meets a row
// another transaction changed waits for it and then evaluates its WHERE
// again on the new row: of two replays of a row, the second finds it
// replaying and changes nothing.
func (s *Store) ChangeDeadLetters(ctx context.Context, c deadletter.Change) ([]int64, error) {
	if s.readOnly {
		return nil, errReadOnly
	}
	if len(c.Seqs) == 0 {
		return nil, nil
	}
	var query string
	var args []any
	if c.To == "" {
		where, wargs := c.Where(pgDollar, pgTime, nil)
		query, args = `DELETE FROM dead_letters WHERE `+where+` RETURNING seq`, wargs
	} else {
		set, sargs := c.Set(pgDollar, pgTime)
		where, wargs := c.Where(pgDollar, pgTime, sargs)
		query, args = `UPDATE dead_letters SET `+set+` WHERE `+where+` RETURNING seq`, wargs
	}
	for i, a := range args {
		if v, ok := a.(string); ok {
			args[i] = pgText(v) // who and through what: text PostgreSQL can hold
		}
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: s.beginFinish})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var changed []int64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			rows.Close()
			return nil, err
		}
		changed = append(changed, seq)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	if len(changed) > 0 {
		s.wroteDeadLetters(ctx)
	}
	return changed, nil
}

// PruneDeadLetters deletes the rows in one of states since before before.
func (s *Store) PruneDeadLetters(ctx context.Context, states []deadletter.State, before time.Time) (int64, error) {
	if s.readOnly {
		return 0, errReadOnly
	}
	if len(states) == 0 {
		return 0, nil
	}
	where, args := deadletter.Prune(states, before, pgDollar, pgTime)
	tag, err := s.pool.Exec(ctx, `DELETE FROM dead_letters WHERE `+where, args...)
	if err != nil {
		return 0, err
	}
	if tag.RowsAffected() > 0 {
		s.wroteDeadLetters(ctx)
	}
	return tag.RowsAffected(), nil
}

// DeadLetterGroups counts the page's groups of the rows q selects: those
// of the page's first load from the kept counts (countedGroups), any
// other selection by GroupsSQL over the rows.
func (s *Store) DeadLetterGroups(ctx context.Context, q deadletter.Query) ([]deadletter.Group, error) {
	if pgKeptShape(q) {
		return s.countedGroups(ctx, q)
	}
	where, args := pgWhere(q)
	rows, err := s.pool.Query(ctx, deadletter.GroupsSQL(where), args...)
	if err != nil {
		return nil, err
	}
	return scanGroups(rows)
}

// scanGroups reads the rows of GroupsSQL, or of its kept counts' twin
// (pgCountedGroupsSQL): word, status, count, first and last dead_at.
func scanGroups(rows pgx.Rows) ([]deadletter.Group, error) {
	defer rows.Close()
	var out []deadletter.Group
	for rows.Next() {
		var g deadletter.Group
		var first, last *time.Time
		if err := rows.Scan(&g.Word, &g.Status, &g.Count, &first, &last); err != nil {
			return nil, err
		}
		if first != nil {
			g.First, g.Last = *first, *last
		}
		out = append(out, g)
	}
	return out, rows.Err()
}
