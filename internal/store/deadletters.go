package store

import (
	"context"

	"eaimq/internal/store/deadletter"
)

// DeadLetters is the table of dead letters that dlq ingest takes out of
// claim.dead, in the store's own database (both backends have it).
type DeadLetters interface {
	// PutDeadLetters writes rows in one durable transaction and returns
	// how many were new: a row whose CopyKey is there already is that
	// copy again (redelivered, or dead-lettered twice) and is skipped.
	// When it returns nil every row is in the database.
	PutDeadLetters(ctx context.Context, rows []deadletter.Row) (added int, err error)
	// DeadLetters returns the rows q selects, in the order of ingestion.
	DeadLetters(ctx context.Context, q deadletter.Query) ([]deadletter.Row, error)
	// CountDeadLetters is how many rows q selects (its After, IDs and
	// filters; not its Limit).
	CountDeadLetters(ctx context.Context, q deadletter.Query) (int64, error)
}

// DeadLettersOf returns st's table of dead letters; false when st has
// none (nil).
func DeadLettersOf(st Store) (DeadLetters, bool) {
	d, ok := st.(DeadLetters)
	return d, ok
}
