package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"eaimq/internal/redact"
)

// Table is the trail's table in a PostgreSQL store's database. It is this
// package's own: the store's schema versions do not know it, and it is
// created here, the first time an entry is written.
const Table = "eaimq_audit"

// tableSQL creates it: the entry as written, and every id it names in an
// array (indexed) for dlq history ID.
const tableSQL = `CREATE TABLE IF NOT EXISTS ` + Table + ` (
	seq   bigserial PRIMARY KEY,
	at    timestamptz NOT NULL,
	ids   text[] NOT NULL,
	entry jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS ` + Table + `_ids ON ` + Table + ` USING gin (ids)`

// table is the trail of a PostgreSQL store.
type table struct {
	pool    *pgxpool.Pool
	where   string
	created atomic.Bool
}

func openTable(ctx context.Context, location string) (*table, error) {
	where := Table + " in " + redact.URL(location)
	cfg, err := pgxpool.ParseConfig(location)
	if err != nil {
		return nil, fmt.Errorf("audit trail %s: %w", where, err)
	}
	cfg.MaxConns = 2
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "eaimq dlq audit"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("audit trail %s: %w", where, err)
	}
	return &table{pool: pool, where: where}, nil
}

func (t *table) Where() string { return t.where }
func (t *table) Close() error  { t.pool.Close(); return nil }

// Check creates the table if it is not there yet, under a transaction-wide
// advisory lock: two dlq processes creating it at once would otherwise race
// in PostgreSQL's catalog (a duplicate pg_type row).
func (t *table) Check(ctx context.Context) error {
	if t.created.Load() {
		return nil
	}
	err := pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('`+Table+`'))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, tableSQL)
		return err
	})
	if err != nil {
		return fmt.Errorf("audit trail %s: %w; the database user needs to create it, or its owner to create it with:\n%s", t.where, err, tableSQL)
	}
	t.created.Store(true)
	return nil
}

func (t *table) Append(ctx context.Context, e Entry) error {
	if err := t.Check(ctx); err != nil {
		return err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	// A commit of the default synchronous_commit: the entry is on disk
	// when Exec returns.
	if _, err := t.pool.Exec(ctx, `INSERT INTO `+Table+` (at, ids, entry) VALUES ($1, $2, $3)`, e.At, e.ids(), b); err != nil {
		return fmt.Errorf("audit trail %s: %w", t.where, err)
	}
	return nil
}

// Entries reads the table in the order the entries were written; a table
// not created yet is a trail with no entry yet.
func (t *table) Entries(ctx context.Context, id string, fn func(Entry) error) error {
	q := `SELECT entry FROM ` + Table + ` ORDER BY seq`
	args := []any{}
	if id != "" {
		q = `SELECT entry FROM ` + Table + ` WHERE ids @> ARRAY[$1]::text[] ORDER BY seq`
		args = append(args, id)
	}
	rows, err := t.pool.Query(ctx, q, args...)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
			return nil
		}
		return fmt.Errorf("audit trail %s: %w", t.where, err)
	}
	defer rows.Close()
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return fmt.Errorf("audit trail %s: %w", t.where, err)
		}
		var e Entry
		if err := json.Unmarshal(raw, &e); err != nil {
			return fmt.Errorf("audit trail %s: %w", t.where, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P01" {
			return nil
		}
		return fmt.Errorf("audit trail %s: %w", t.where, err)
	}
	return nil
}
