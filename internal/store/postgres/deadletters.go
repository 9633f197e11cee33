package postgres

import (
	"context"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"eaimq/internal/store/deadletter"
)

// pgMigrate4 adds the table of dead letters that dlq ingest takes out of
// claim.dead, as SQLite's version 6 does (deadletter.Row), with the same
// indexes.
func pgMigrate4(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `
	CREATE TABLE dead_letters (
		seq           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		copy_key      text NOT NULL UNIQUE,       -- which dead-lettered copy: one row each
		message_id    text NOT NULL,              -- pgKey of message_id, else guid, else sha256:
		claim_id      text NOT NULL DEFAULT '',
		guid          text NOT NULL DEFAULT '',
		reason        text NOT NULL,              -- the reason on record when ingested (unknown: none)
		status        integer NOT NULL DEFAULT 0, -- the last HTTP status on record, 0: none
		answer        text NOT NULL DEFAULT '',
		attempts      integer NOT NULL DEFAULT 0,
		record        text,                       -- the consumer's record, JSON; NULL: none
		dead_at       timestamptz,                -- x-death time
		broker_reason text NOT NULL DEFAULT '',
		properties    text NOT NULL,
		headers       text NOT NULL,
		body          bytea NOT NULL,
		raw           text NOT NULL DEFAULT '',   -- why it could not be read; '' when it could
		ingested_at   timestamptz NOT NULL
	);
	CREATE INDEX dead_letters_message ON dead_letters(message_id, seq);
	CREATE INDEX dead_letters_claim ON dead_letters(claim_id, seq);
	CREATE INDEX dead_letters_guid ON dead_letters(guid, seq);
	CREATE INDEX dead_letters_reason ON dead_letters(reason, seq);
	CREATE INDEX dead_letters_status ON dead_letters(status, seq);`)
	return err
}

// PutDeadLetters writes rows in one transaction, committed with the
// durability of an outcome record (beginFinish): dlq ingest acks the
// messages after it returns. Text that PostgreSQL cannot hold (NUL,
// invalid UTF-8) is made fit here, so that one such message never fails
// a batch again and again: a key by pgKey, the rest by pgText; the body
// is bytea, kept as it came.
func (s *Store) PutDeadLetters(ctx context.Context, rows []deadletter.Row) (int, error) {
	if s.readOnly {
		return 0, errReadOnly
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: s.beginFinish})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var b pgx.Batch
	for _, r := range rows {
		var rec *string
		if r.Record != nil {
			v := pgText(string(r.Record))
			rec = &v
		}
		var deadAt *time.Time
		if !r.DeadAt.IsZero() {
			deadAt = &r.DeadAt
		}
		state, stateAt := pgStateOf(r)
		b.Queue(`INSERT INTO dead_letters (`+deadletter.Columns+`, `+deadletter.StateColumns+`, words)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21) ON CONFLICT (copy_key) DO NOTHING`,
			pgKey(r.CopyKey), pgKey(r.MessageID), pgText(r.ClaimID), pgText(r.GUID), pgText(r.Reason), r.Status, pgText(r.Answer),
			r.Attempts, rec, deadAt, pgText(r.BrokerReason), pgText(string(r.Properties)), pgText(string(r.Headers)), r.Body,
			pgText(r.Raw), r.IngestedAt, state, pgText(r.StateBy), pgText(r.StateVia), stateAt, pgWords(r.Body))
	}
	res := tx.SendBatch(ctx, &b)
	added := 0
	for range rows {
		tag, err := res.Exec()
		if err != nil {
			res.Close()
			return 0, err
		}
		added += int(tag.RowsAffected())
	}
	if err := res.Close(); err != nil {
		return 0, err
	}
	return added, tx.Commit(ctx)
}

// DeadLetters returns the rows q selects, in the order of ingestion.
func (s *Store) DeadLetters(ctx context.Context, q deadletter.Query) ([]deadletter.Row, error) {
	where, args := pgWhere(q)
	query := `SELECT seq, ` + deadletter.LeanColumns(q, "''::bytea") + `, ` + deadletter.StateColumns + ` FROM dead_letters WHERE ` + where + ` ORDER BY seq`
	if q.Limit > 0 {
		query += " LIMIT " + strconv.Itoa(q.Limit)
	}
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]deadletter.Row, 0, min(max(q.Limit, 0), maxPageCap)) // a page at once: no copies as it grows
	for rows.Next() {
		var r deadletter.Row
		var rec *string
		var deadAt *time.Time
		var props, headers, state string
		var stateAt *time.Time
		if err := rows.Scan(&r.Seq, &r.CopyKey, &r.MessageID, &r.ClaimID, &r.GUID, &r.Reason, &r.Status, &r.Answer, &r.Attempts, &rec,
			&deadAt, &r.BrokerReason, &props, &headers, &r.Body, &r.Raw, &r.IngestedAt, &state, &r.StateBy, &r.StateVia, &stateAt); err != nil {
			return nil, err
		}
		r.State = deadletter.State(state)
		if stateAt != nil {
			r.StateAt = *stateAt
		}
		if rec != nil {
			r.Record = []byte(*rec)
		}
		if deadAt != nil {
			r.DeadAt = *deadAt
		}
		r.MessageID = pgUnkey(r.MessageID)
		r.Properties, r.Headers = []byte(props), []byte(headers)
		out = append(out, r)
	}
	return out, rows.Err()
}

// CountDeadLetters counts the rows q selects, at most q.Limit of them
// when it is set (deadletter.CountSQL).
func (s *Store) CountDeadLetters(ctx context.Context, q deadletter.Query) (int64, error) {
	where, args := pgWhere(q)
	var n int64
	err := s.pool.QueryRow(ctx, deadletter.CountSQL(where, q.Limit), args...).Scan(&n)
	return n, err
}

// pgUnkey is the id pgKey kept.
func pgUnkey(k string) string {
	if strings.HasPrefix(k, `\x`) {
		if b, err := hex.DecodeString(k[2:]); err == nil {
			return string(b)
		}
	}
	return k
}

// pgWhere is q's condition with PostgreSQL's placeholders, its IDs as
// pgKey keeps a message_id (a claimId that needed it matches nothing).
func pgWhere(q deadletter.Query) (string, []any) {
	ids := make([]string, len(q.IDs))
	for i, id := range q.IDs {
		ids[i] = pgKey(id)
	}
	q.IDs = ids
	return q.Where(pgDollar, pgTextCond)
}

// maxPageCap bounds the room DeadLetters makes for a page before reading
// it (q.Limit rows: a walk's page of 500, or 2,000 read lean).
const maxPageCap = 2000
