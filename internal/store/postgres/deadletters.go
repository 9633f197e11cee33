package postgres

import (
	"context"
	"encoding/hex"
	"encoding/json"
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
//
// The rows go in one INSERT of arrays (unnest), in their order (the
// ordinality: seq is the order of ingestion), not a statement a row: the
// trigger that keeps the groups' counts (pgMigrate7) runs once a
// statement and adds a delta row per key it saw, so a batch adds a few,
// not one a row. A copy_key twice in the batch, or already there, is
// skipped (DO NOTHING), as before. Each row's words are a JSON array:
// arrays of arrays must be rectangular in PostgreSQL.
func (s *Store) PutDeadLetters(ctx context.Context, rows []deadletter.Row) (int, error) {
	if s.readOnly {
		return 0, errReadOnly
	}
	if len(rows) == 0 {
		return 0, nil
	}
	n := len(rows)
	var (
		copyKey, messageID, claimID, guid, reason, answer = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		brokerReason, props, headers, raw, state, stateBy = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		stateVia, words                                   = make([]string, n), make([]string, n)
		status, attempts                                  = make([]int32, n), make([]int32, n)
		record                                            = make([]*string, n)
		deadAt, stateAt                                   = make([]*time.Time, n), make([]*time.Time, n)
		ingestedAt                                        = make([]time.Time, n)
		body                                              = make([][]byte, n)
	)
	for i, r := range rows {
		if r.Record != nil {
			v := pgText(string(r.Record))
			record[i] = &v
		}
		if !r.DeadAt.IsZero() {
			t := r.DeadAt
			deadAt[i] = &t
		}
		st, at := pgStateOf(r)
		w, err := json.Marshal(pgWords(r.Body))
		if err != nil {
			return 0, err
		}
		copyKey[i], messageID[i], claimID[i], guid[i], reason[i], status[i] = pgKey(r.CopyKey), pgKey(r.MessageID), pgText(r.ClaimID), pgText(r.GUID), pgText(r.Reason), int32(r.Status)
		answer[i], attempts[i], brokerReason[i], props[i], headers[i] = pgText(r.Answer), int32(r.Attempts), pgText(r.BrokerReason), pgText(string(r.Properties)), pgText(string(r.Headers))
		body[i], raw[i], ingestedAt[i], state[i], stateBy[i], stateVia[i], stateAt[i], words[i] = r.Body, pgText(r.Raw), r.IngestedAt, st, pgText(r.StateBy), pgText(r.StateVia), at, string(w)
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: s.beginFinish})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	tag, err := tx.Exec(ctx, `INSERT INTO dead_letters (`+deadletter.Columns+`, `+deadletter.StateColumns+`, words)
		SELECT c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15, c16, c17, c18, c19, c20,
			ARRAY(SELECT jsonb_array_elements_text(c21))
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::integer[], $7::text[], $8::integer[], $9::text[],
			$10::timestamptz[], $11::text[], $12::text[], $13::text[], $14::bytea[], $15::text[], $16::timestamptz[],
			$17::text[], $18::text[], $19::text[], $20::timestamptz[], $21::jsonb[])
			WITH ORDINALITY AS r(c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15, c16, c17, c18, c19, c20, c21, ord)
		ORDER BY ord
		ON CONFLICT (copy_key) DO NOTHING`,
		copyKey, messageID, claimID, guid, reason, status, answer, attempts, record, deadAt, brokerReason, props, headers, body,
		raw, ingestedAt, state, stateBy, stateVia, stateAt, words)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	if tag.RowsAffected() > 0 {
		s.wroteDeadLetters(ctx)
	}
	return int(tag.RowsAffected()), nil
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
	if pgKeptShape(q) {
		return s.countedRows(ctx, q)
	}
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
