package store

import (
	"context"
	"time"

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
	// filters), at most q.Limit when it is set (0: all): a count that
	// stops there, so that its cost is bounded by the limit, not by the
	// table.
	CountDeadLetters(ctx context.Context, q deadletter.Query) (int64, error)
	// LastDeadLetterSeq is the largest seq in the table (0: none): a bulk
	// action's selection ends there (Query.Through).
	LastDeadLetterSeq(ctx context.Context) (int64, error)
	// ChangeDeadLetters applies c in one durable transaction and returns
	// the seqs it changed: a row not in c.From (another operator changed
	// it first) is left as it is and not returned. When it returns nil
	// the change is in the database.
	ChangeDeadLetters(ctx context.Context, c deadletter.Change) ([]int64, error)
	// DeadLetterGroups counts the page's groups of the rows q selects
	// (its Limit aside), in one query: PostgreSQL reads those of the
	// page's first load from counts it keeps as rows change.
	DeadLetterGroups(ctx context.Context, q deadletter.Query) ([]deadletter.Group, error)
	// PruneDeadLetters deletes the rows in one of states since before
	// before (the archive's retention) and returns how many.
	PruneDeadLetters(ctx context.Context, states []deadletter.State, before time.Time) (int64, error)
}

// DeadLettersOf returns st's table of dead letters; false when st has
// none (nil).
func DeadLettersOf(st Store) (DeadLetters, bool) {
	d, ok := st.(DeadLetters)
	return d, ok
}
