package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"
)

// SchemaVersion is PRAGMA user_version of a file this code wrote. Open
// migrates older files up to it and refuses newer ones.
const SchemaVersion = 9

// migrations[v] takes a file from version v to v+1, inside one
// transaction.
var migrations = []func(ctx context.Context, tx *sql.Tx) error{
	migrate1,
	migrate2,
	migrate3,
	migrate4,
	migrate5,
	migrate6, // deadletters.go
	migrate7, // deadletterstates.go
	migrate8, // deadletterstates.go
	migrate9, // deadlettertext.go
}

const schema1 = `CREATE TABLE claims (
		message_id  TEXT PRIMARY KEY,
		state       TEXT NOT NULL,            -- inflight | done | failed | dead
		owner       TEXT,                     -- host:pid:start of the process holding it inflight
		lease_until INTEGER,                  -- unix ms; an inflight claim past it is free again
		claim_id    TEXT,
		attempts    INTEGER NOT NULL DEFAULT 0, -- partner calls, all copies
		failures    INTEGER NOT NULL DEFAULT 0, -- transient failures of the current copy
		last_status INTEGER,                  -- last HTTP status, 0 when there was no answer
		last_error  TEXT,                     -- short error or response excerpt
		dead_reason TEXT,                     -- why the last copy was dead-lettered, in a sentence
		updated_at  INTEGER NOT NULL,
		done_at     INTEGER
	) WITHOUT ROWID;
	CREATE TABLE attempts (
		id          INTEGER PRIMARY KEY,
		message_id  TEXT NOT NULL,
		at          INTEGER NOT NULL,         -- unix ms
		redelivered INTEGER NOT NULL,
		status      INTEGER NOT NULL,         -- HTTP status, 0 when there was no answer
		error       TEXT,
		action      TEXT NOT NULL,            -- ack | requeue | dead
		latency_ms  INTEGER NOT NULL
	);
	CREATE INDEX attempts_by_message ON attempts(message_id, id);`

// migrate1 creates the schema. A file that already has a table named
// processed is the lab's consumer.py's dedup file, found at the default path
// because the Go programs replace the Python scripts in place. It is adopted,
// not refused: every message_id in it becomes a delivered record (so none of
// those claims is sent again), and its table is left as it was. Only its
// message_id column is relied on.
func migrate1(ctx context.Context, tx *sql.Tx) error {
	var labTable int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master
		WHERE type = 'table' AND name = 'processed' COLLATE NOCASE`).Scan(&labTable); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, schema1); err != nil {
		return err
	}
	if labTable == 0 {
		// The lab's word for the dedup record, as a view of ours.
		_, err := tx.ExecContext(ctx, `CREATE VIEW processed AS
			SELECT message_id, claim_id, done_at AS processed_at FROM claims WHERE state = 'done'`)
		return err
	}
	now := nowMS()
	_, err := tx.ExecContext(ctx, `INSERT INTO claims (message_id, state, last_error, updated_at, done_at)
		SELECT CAST(message_id AS TEXT), 'done', 'recorded by the lab''s consumer.py', ?, ?
		FROM processed WHERE message_id IS NOT NULL AND CAST(message_id AS TEXT) <> ''
		ON CONFLICT (message_id) DO NOTHING`, now, now)
	if err != nil {
		return fmt.Errorf("adopt the lab's processed table (it needs a message_id column): %w", err)
	}
	return nil
}

// migrate2 adds the recorded reason (the Reason word) to records and
// attempts, so that dlq reads why instead of guessing it.
func migrate2(ctx context.Context, tx *sql.Tx) error {
	for _, q := range []string{
		`ALTER TABLE claims ADD COLUMN reason TEXT`,
		`ALTER TABLE attempts ADD COLUMN reason TEXT`,
		`UPDATE claims SET reason = ` + backfillReason,
		// v1 attempts kept only the action; a dead-letter attempt takes its
		// claim's reason, which is right for the last one and the best
		// there is for older ones.
		`UPDATE attempts SET reason = CASE action
			WHEN 'requeue' THEN 'retry'
			WHEN 'dead' THEN (SELECT c.reason FROM claims c WHERE c.message_id = attempts.message_id AND c.state = 'dead')
			END`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// backfillReason is the migration's reading of a v1 record: v1 kept the
// decision as a sentence, written by one function whose sentences are
// fixed, so the sentence (not the HTTP status) says which reason it was.
const backfillReason = `CASE
	WHEN state = 'done' THEN 'delivered'
	WHEN state = 'failed' THEN 'retry'
	WHEN state = 'dead' AND dead_reason = 'no message_id and no guid in the body' THEN 'no-id'
	WHEN state = 'dead' AND dead_reason = 'rejected by the claim system' THEN 'rejected'
	WHEN state = 'dead' AND dead_reason LIKE 'transient failure again%' THEN 'failed-twice'
	END`

// migrate3 changes no table: version 3 marks a file whose writers keep the
// lock-file protocol of solo mode (see solo), so that a program of version
// 2, which would write in-progress rows that a solo store never reads,
// refuses it.
func migrate3(context.Context, *sql.Tx) error { return nil }

// migrate4 adds the lineage of a claim's retries (consumer --retry-delays):
// the first step whose copy is still to be acted on (claim.Found.Lineage).
func migrate4(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `ALTER TABLE claims ADD COLUMN lineage INTEGER NOT NULL DEFAULT 0`)
	return err
}

// migrate5 adds the token of the copy a claim was dead-lettered for
// (claim.Found.DeadToken), so that only that copy is rejected again.
func migrate5(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `ALTER TABLE claims ADD COLUMN dead_token TEXT NOT NULL DEFAULT ''`)
	return err
}

// init sets the file up (WAL, page size, checkpoints, durability), checks
// its schema version, and migrates it (not a read-only store's).
func (s *Store) init(readOnly bool) error {
	ctx := context.Background()
	if !readOnly {
		if err := s.pragmas(ctx); err != nil {
			return err
		}
	}
	var v int
	if err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("not an SQLite file, or unreadable: %w", err)
	}
	if v > SchemaVersion {
		return NewerSchemaError{Have: v, Want: SchemaVersion}
	}
	if v == SchemaVersion {
		return nil
	}
	if readOnly {
		return fmt.Errorf("schema version %d, want %d (run the consumer once to migrate)", v, SchemaVersion)
	}
	return s.migrate(ctx)
}

func (s *Store) pragmas(ctx context.Context) error {
	// WAL: readers (dlq list) never block the consumer, and a commit is
	// one append to the log.
	// Small pages for a new file: a commit writes each page it dirtied to
	// the WAL, and a claim's rows are a few dozen bytes. (No effect on
	// an existing file.)
	if _, err := s.db.ExecContext(ctx, "PRAGMA page_size=1024"); err != nil {
		return err
	}
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
		return err
	}
	// In WAL mode SQLite commits without fsync and the writer fsyncs the
	// WAL itself, once per group commit (see writer). Where WAL is not available
	// (some network filesystems), SQLite's own synchronous setting does
	// the work, one fsync per commit.
	// Checkpoint (copy the WAL back into the file) every 16 MiB rather
	// than every 1000 pages: a claim's pages are rewritten again and
	// again, and a larger checkpoint writes each of them once.
	if _, err := s.db.ExecContext(ctx, "PRAGMA wal_autocheckpoint=16384"); err != nil {
		return err
	}
	level := "normal"
	if mode == "wal" {
		s.walSync = s.durability == "full" && !s.ablation.NoWALSync
		if s.ablation.NoWALSync {
			level = s.durability
		}
	} else {
		level = s.durability
	}
	_, err := s.db.ExecContext(ctx, "PRAGMA synchronous="+level)
	return err
}

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// Re-read inside the write lock: another consumer may have migrated.
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return err
	}
	for ; v < SchemaVersion; v++ {
		if err := migrations[v](ctx, tx); err != nil {
			return fmt.Errorf("migrate schema %d→%d: %w", v, v+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, "PRAGMA user_version="+strconv.Itoa(SchemaVersion)); err != nil {
		return err
	}
	return tx.Commit()
}

// NewerSchemaError: the store was written by a newer release, whose
// records this one cannot read right. Run that release, or restore the
// backup taken before the upgrade.
type NewerSchemaError struct{ Have, Want int }

func (e NewerSchemaError) Error() string {
	return fmt.Sprintf("schema version %d is newer than this program's %d (run the newer release, or restore the backup taken before it)", e.Have, e.Want)
}

func nowMS() int64 { return time.Now().UnixMilli() }
