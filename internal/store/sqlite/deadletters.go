package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"strconv"
	"time"

	"eaimq/internal/store/deadletter"
)

// migrate6 adds the table of dead letters that dlq ingest takes out of
// claim.dead (deadletter.Row), with the indexes that list and show read
// by: the claimId, the guid, the reason and the status, each with seq so
// that a page of them is read in order.
func migrate6(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `CREATE TABLE dead_letters (
		seq           INTEGER PRIMARY KEY,
		copy_key      TEXT NOT NULL UNIQUE,      -- which dead-lettered copy: one row each
		message_id    TEXT NOT NULL,             -- message_id, else guid, else sha256:
		claim_id      TEXT NOT NULL DEFAULT '',
		guid          TEXT NOT NULL DEFAULT '',
		reason        TEXT NOT NULL,             -- the reason on record when ingested (unknown: none)
		status        INTEGER NOT NULL DEFAULT 0, -- the last HTTP status on record, 0: none
		answer        TEXT NOT NULL DEFAULT '',
		attempts      INTEGER NOT NULL DEFAULT 0,
		record        TEXT,                      -- the consumer's record, JSON; NULL: none
		dead_at       INTEGER,                   -- x-death time, unix ms
		broker_reason TEXT NOT NULL DEFAULT '',
		properties    TEXT NOT NULL,
		headers       TEXT NOT NULL,
		body          BLOB NOT NULL,
		raw           TEXT NOT NULL DEFAULT '',  -- why it could not be read; '' when it could
		ingested_at   INTEGER NOT NULL
	);
	CREATE INDEX dead_letters_message ON dead_letters(message_id, seq);
	CREATE INDEX dead_letters_claim ON dead_letters(claim_id, seq);
	CREATE INDEX dead_letters_guid ON dead_letters(guid, seq);
	CREATE INDEX dead_letters_reason ON dead_letters(reason, seq);
	CREATE INDEX dead_letters_status ON dead_letters(status, seq);`)
	return err
}

// PutDeadLetters writes rows in one transaction of the writer, durable
// (the WAL fsynced) before it returns: dlq ingest acks the messages
// after it, and a row must outlive a power loss once its message is gone
// from claim.dead.
func (s *Store) PutDeadLetters(ctx context.Context, rows []deadletter.Row) (int, error) {
	added := 0
	err := s.write(ctx, true, func(tx *sql.Tx) error {
		added = 0 // the writer may run fn again after a failed batch
		stmt, err := tx.Prepare(`INSERT INTO dead_letters (` + deadletter.Columns + `, ` + deadletter.StateColumns + `)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (copy_key) DO NOTHING`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		words, err := tx.Prepare(insertWords)
		if err != nil {
			return err
		}
		defer words.Close()
		var join deadletter.Joiner // wordsOf's words, its buffers kept from row to row
		var nulWords *sql.Stmt     // prepared for the first body with a NUL byte
		defer func() {
			if nulWords != nil {
				nulWords.Close()
			}
		}()
		for _, r := range rows {
			var rec, deadAt any
			if r.Record != nil {
				rec = string(r.Record)
			}
			if !r.DeadAt.IsZero() {
				deadAt = r.DeadAt.UnixMilli()
			}
			state, stateAt := stateOf(r)
			res, err := stmt.Exec(r.CopyKey, r.MessageID, r.ClaimID, r.GUID, r.Reason, r.Status, r.Answer, r.Attempts, rec,
				deadAt, r.BrokerReason, string(r.Properties), string(r.Headers), r.Body, r.Raw, r.IngestedAt.UnixMilli(),
				state, r.StateBy, r.StateVia, stateAt)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			added += int(n)
			if n == 1 { // new: its words too (a copy there already has them)
				seq, err := res.LastInsertId()
				w := join.Join(r.Body) // bound as a blob: FTS4 reads its bytes as text
				if err == nil {
					_, err = words.Exec(seq, w)
				}
				if err == nil && bytes.IndexByte(r.Body, 0) >= 0 {
					// FTS4 reads such a body back only up to the NUL
					// (migrate9): its words are kept for the delete.
					if nulWords == nil {
						nulWords, err = tx.Prepare(insertNulWords)
					}
					if err == nil {
						_, err = nulWords.Exec(seq, string(w))
					}
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, err // rolled back: none of them is in the file
	}
	return added, nil
}

// DeadLetters returns the rows q selects, in the order of ingestion.
func (s *Store) DeadLetters(ctx context.Context, q deadletter.Query) ([]deadletter.Row, error) {
	where, args := q.Where(qmark, textMatch)
	rows, err := s.db.QueryContext(ctx, rowsSQL(deadletter.LeanColumns(q, "x''"), where, q.Limit), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]deadletter.Row, 0, min(max(q.Limit, 0), maxPageCap)) // a page at once: no copies as it grows
	for rows.Next() {
		var r deadletter.Row
		var rec sql.NullString
		var deadAt sql.NullInt64
		var props, headers string
		var ingested int64
		var state string
		var stateAt sql.NullInt64
		if err := rows.Scan(&r.Seq, &r.CopyKey, &r.MessageID, &r.ClaimID, &r.GUID, &r.Reason, &r.Status, &r.Answer, &r.Attempts, &rec,
			&deadAt, &r.BrokerReason, &props, &headers, &r.Body, &r.Raw, &ingested, &state, &r.StateBy, &r.StateVia, &stateAt); err != nil {
			return nil, err
		}
		r.State = deadletter.State(state)
		if stateAt.Valid {
			r.StateAt = time.UnixMilli(stateAt.Int64)
		}
		if rec.Valid {
			r.Record = []byte(rec.String)
		}
		if deadAt.Valid {
			r.DeadAt = time.UnixMilli(deadAt.Int64)
		}
		r.Properties, r.Headers, r.IngestedAt = []byte(props), []byte(headers), time.UnixMilli(ingested)
		out = append(out, r)
	}
	return out, rows.Err()
}

// rowsSQL is the query of columns of the rows where selects, in seq order, at most
// limit (0: all).
//
// A page's seqs are chosen first, from the index alone, and only then are
// its rows read, by their seq: an index on (state, seq) read for two
// states (deadletter.Live) yields seqs out of order, and SQLite then
// sorted the page's whole rows (bodies and all, each spilling over
// 1 KiB pages) in a temporary B-tree, page after page of a whole list;
// sorting the 500 seqs alone cost half the CPU (sqlite3, 200 pages of
// a million rows: 0.14 s user against 0.23 to 0.31 s).
func rowsSQL(columns, where string, limit int) string {
	cols := `SELECT seq, ` + columns + `, ` + deadletter.StateColumns + ` FROM dead_letters WHERE `
	if limit <= 0 {
		return cols + where + ` ORDER BY seq`
	}
	return cols + `seq IN (SELECT seq FROM dead_letters WHERE ` + where + ` ORDER BY seq LIMIT ` + strconv.Itoa(limit) + `) ORDER BY seq`
}

// CountDeadLetters counts the rows q selects, at most q.Limit of them
// when it is set (deadletter.CountSQL).
func (s *Store) CountDeadLetters(ctx context.Context, q deadletter.Query) (int64, error) {
	where, args := q.Where(qmark, textMatch)
	var n int64
	err := s.db.QueryRowContext(ctx, deadletter.CountSQL(where, q.Limit), args...).Scan(&n)
	return n, err
}

// maxPageCap bounds the room DeadLetters makes for a page before reading
// it (q.Limit rows: a walk's page of 500, or 2,000 read lean).
const maxPageCap = 2000
