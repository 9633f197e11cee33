package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// pgSchemaVersion is the version of a database this code wrote. Open
// migrates older ones up to it and refuses newer ones. It counts on its
// own: the PostgreSQL schema began after SQLite's second version.
const pgSchemaVersion = 7

// pgMigrations[v] takes a database from version v to v+1, inside one
// transaction.
var pgMigrations = []func(ctx context.Context, tx pgx.Tx) error{
	pgMigrate1,
	pgMigrate2,
	pgMigrate3,
	pgMigrate4, // deadletters.go
	pgMigrate5, // deadletterstates.go
	pgMigrate6, // deadletterstates.go
	pgMigrate7, // deadlettercounts.go
}

// pgMigrate1 creates the schema: the same tables and columns as SQLite's
// version 2, with PostgreSQL's types. There is no lease_until (the lock is
// the session, see Postgres), and owner names the holder for a late
// Finish's check and for people. Times are timestamptz.
func pgMigrate1(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `
	CREATE TABLE claims (
		message_id  text PRIMARY KEY,     -- see pgKey for ids PostgreSQL text cannot hold
		state       text NOT NULL CHECK (state IN ('inflight', 'done', 'failed', 'dead')),
		owner       text,                 -- host:pid:start:open of the store that took it in flight
		claim_id    text,
		attempts    integer NOT NULL DEFAULT 0, -- partner calls, all copies
		failures    integer NOT NULL DEFAULT 0, -- transient failures of the current copy
		last_status integer,              -- last HTTP status, 0 when there was no answer
		last_error  text,                 -- short error or response excerpt
		reason      text,                 -- the Reason word of the last decision
		dead_reason text,                 -- why the last copy was dead-lettered, in a sentence
		updated_at  timestamptz NOT NULL,
		done_at     timestamptz
	);
	CREATE TABLE attempts (
		id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		message_id  text NOT NULL,
		at          timestamptz NOT NULL,
		redelivered boolean NOT NULL,
		status      integer NOT NULL,     -- HTTP status, 0 when there was no answer
		error       text,
		action      text NOT NULL,        -- ack | requeue | dead
		reason      text,                 -- the Reason word
		latency_ms  bigint NOT NULL
	);
	CREATE INDEX attempts_by_message ON attempts (message_id, id);
	CREATE VIEW processed AS
		SELECT message_id, claim_id, done_at AS processed_at FROM claims WHERE state = 'done';`)
	return err
}

// pgMigrate2 adds the lineage of a claim's retries (consumer
// --retry-delays), as SQLite's version 4 does: the first step whose copy
// is still to be acted on (claim.Found.Lineage).
func pgMigrate2(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `ALTER TABLE claims ADD COLUMN lineage integer NOT NULL DEFAULT 0`)
	return err
}

// pgMigrate3 adds the token of the copy a claim was dead-lettered for, as
// SQLite's version 5 does (claim.Found.DeadToken).
func pgMigrate3(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `ALTER TABLE claims ADD COLUMN dead_token text NOT NULL DEFAULT ''`)
	return err
}
