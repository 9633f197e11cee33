package sqlite

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"eaimq/internal/store/deadletter"
)

// migrate7 adds what became of each ingested dead letter (replay, purge,
// restore: deadletter.State), who changed it, through what and when; the
// rows already there are dead. The index on (state, seq) is what list
// and the archive read by, and what the retention prunes by.
//
// It also adds the full-text index that -text narrows by: an FTS4 table
// of each row's distinct words (deadletter.TextWords of the body, joined
// by spaces) under the row's seq. Its words, not its body: an FTS4 index
// of the bodies keeps a posting for every occurrence of every word, which
// cost ingestion several times what the distinct words do, and a word's
// presence is all a search asks.
// PutDeadLetters writes a row's words with it; a trigger deletes them
// with it. The rows there already get theirs here.
func migrate7(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `
	ALTER TABLE dead_letters ADD COLUMN state TEXT NOT NULL DEFAULT 'dead'; -- dead | replaying | replayed | purged
	ALTER TABLE dead_letters ADD COLUMN state_by TEXT NOT NULL DEFAULT '';
	ALTER TABLE dead_letters ADD COLUMN state_via TEXT NOT NULL DEFAULT '';
	ALTER TABLE dead_letters ADD COLUMN state_at INTEGER;                  -- unix ms; NULL: never changed
	CREATE INDEX dead_letters_state ON dead_letters(state, seq);
	CREATE VIRTUAL TABLE dead_letter_text USING fts4(words, tokenize=simple);
	CREATE TRIGGER dead_letter_text_out AFTER DELETE ON dead_letters
	BEGIN
		DELETE FROM dead_letter_text WHERE docid = old.seq;
	END;`)
	if err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, `SELECT seq, body FROM dead_letters`)
	if err != nil {
		return err
	}
	type body struct {
		seq int64
		b   []byte
	}
	var bodies []body
	for rows.Next() {
		var b body
		if err := rows.Scan(&b.seq, &b.b); err != nil {
			rows.Close()
			return err
		}
		bodies = append(bodies, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, b := range bodies {
		if _, err := tx.ExecContext(ctx, insertWords, b.seq, wordsOf(b.b)); err != nil {
			return err
		}
	}
	return nil
}

// migrate8 adds the index that the page's groups are counted by
// (deadletter.GroupsSQL): the columns of a group and dead_at, seq being
// the rowid that every SQLite index holds. The count reads it alone, in
// its order, where it read every row of the table; one more index entry
// a row ingested. On a big table the step takes as long as the index
// takes to build (some 20 s for a million rows).
func migrate8(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `CREATE INDEX dead_letters_groups ON dead_letters(state, reason, status, broker_reason, dead_at)`)
	return err
}

// insertWords writes a row's words (wordsOf) under its seq.
const insertWords = `INSERT INTO dead_letter_text (docid, words) VALUES (?, ?)`

// wordsOf is body's distinct words as dead_letter_text keeps them: all
// of them (FTS4 has no bound to keep), each as the simple tokenizer reads
// it back.
func wordsOf(body []byte) string {
	return strings.Join(deadletter.TextWords(string(body)), " ")
}

// textMatch narrows to the rows whose body has each of words, by the
// FTS4 index: a phrase of one word each (a word holds no quote).
func textMatch(words []string, arg func(any) string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = `"` + w + `"`
	}
	return "seq IN (SELECT docid FROM dead_letter_text WHERE dead_letter_text MATCH " + arg(strings.Join(q, " ")) + ")"
}

// stateOf is r's state and its time as the table keeps them: a new row
// is dead, never changed.
func stateOf(r deadletter.Row) (string, any) {
	state := r.State
	if state == "" {
		state = deadletter.StateDead
	}
	if r.StateAt.IsZero() {
		return string(state), nil
	}
	return string(state), r.StateAt.UnixMilli()
}

func ms(t time.Time) any { return t.UnixMilli() }

func qmark(int) string { return "?" }

// LastDeadLetterSeq is the largest seq (0: none).
func (s *Store) LastDeadLetterSeq(ctx context.Context) (int64, error) {
	var n sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT max(seq) FROM dead_letters`).Scan(&n)
	return n.Int64, err
}

// ChangeDeadLetters applies c in one transaction of the writer, durable
// before it returns: a replay publishes only after its claim is in the
// file, and marks a row replayed only after the broker's confirm.
// SQLite runs one writer at a time, over every process with the file, so
// the UPDATE's condition on the state is read and written with no other
// writer between: of two replays of a row, the second finds it replaying.
func (s *Store) ChangeDeadLetters(ctx context.Context, c deadletter.Change) ([]int64, error) {
	if len(c.Seqs) == 0 {
		return nil, nil
	}
	var changed []int64
	err := s.write(ctx, true, func(tx *sql.Tx) error {
		changed = changed[:0] // the writer may run fn again after a failed batch
		var query string
		var args []any
		if c.To == "" {
			where, wargs := c.Where(qmark, ms, nil)
			query, args = `DELETE FROM dead_letters WHERE `+where+` RETURNING seq`, wargs
		} else {
			set, sargs := c.Set(qmark, ms)
			where, wargs := c.Where(qmark, ms, sargs)
			query, args = `UPDATE dead_letters SET `+set+` WHERE `+where+` RETURNING seq`, wargs
		}
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				return err
			}
			changed = append(changed, seq)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err // rolled back: nothing changed
	}
	return changed, nil
}

// PruneDeadLetters deletes the rows in one of states since before before.
func (s *Store) PruneDeadLetters(ctx context.Context, states []deadletter.State, before time.Time) (int64, error) {
	if len(states) == 0 {
		return 0, nil
	}
	var n int64
	err := s.write(ctx, false, func(tx *sql.Tx) error {
		where, args := deadletter.Prune(states, before, qmark, ms)
		res, err := tx.ExecContext(ctx, `DELETE FROM dead_letters WHERE `+where, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// DeadLetterGroups counts the page's groups of the rows q selects.
func (s *Store) DeadLetterGroups(ctx context.Context, q deadletter.Query) ([]deadletter.Group, error) {
	where, args := q.Where(qmark, textMatch)
	rows, err := s.db.QueryContext(ctx, deadletter.GroupsSQL(where), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []deadletter.Group
	for rows.Next() {
		var g deadletter.Group
		var first, last sql.NullInt64
		if err := rows.Scan(&g.Word, &g.Status, &g.Count, &first, &last); err != nil {
			return nil, err
		}
		if first.Valid {
			g.First, g.Last = time.UnixMilli(first.Int64), time.UnixMilli(last.Int64)
		}
		out = append(out, g)
	}
	return out, rows.Err()
}
