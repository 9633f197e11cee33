// Package deadletter is the row of a dead letter ingested into the store's
// database (dlq ingest), as both backends keep it and dlq reads it: one
// type, so that SQLite and PostgreSQL cannot disagree about what a row
// holds.
package deadletter

import (
	"strings"
	"time"
)

// Row is one dead-lettered copy: the message as claim.dead held it and
// what the consumer had recorded of its claim when it was ingested.
type Row struct {
	Seq int64 // the row's place, in the order of ingestion (keyset paging)
	// CopyKey says which dead-lettered copy this is (dlq's copyKey): the
	// same copy delivered twice, or dead-lettered twice by the broker,
	// has the same key and is one row.
	CopyKey   string
	MessageID string // the dead letter's key: message_id, else guid, else sha256: (claim.Key)
	ClaimID   string
	GUID      string
	// What the consumer recorded, when the row was ingested: the reason's
	// word ("unknown" without a record), the last HTTP status (0: none),
	// the answer or the error, the partner calls, and the whole record
	// as JSON (nil: none).
	Reason   string
	Status   int
	Answer   string
	Attempts int
	Record   []byte
	// From x-death: when, and the broker's reason (rejected,
	// delivery_limit, ...).
	DeadAt       time.Time
	BrokerReason string
	// The message: its properties and headers (dlq's typed JSON) and body.
	Properties []byte
	Headers    []byte
	Body       []byte
	// Raw is why the message could not be read ("" when it could): then
	// Properties and Headers hold what could be kept, Body is as it came.
	Raw        string
	IngestedAt time.Time
}

// Query selects rows, in Seq order: those after After, at most Limit (0:
// all). IDs (none: any) select a row whose MessageID or ClaimID is one of
// them. Reason ("": any) and Status (0: any, -1: none on record) are the
// columns; BrokerReason ("": any) is x-death's reason.
type Query struct {
	After        int64
	Limit        int
	IDs          []string
	Reason       string
	Status       int
	BrokerReason string
}

// Where is the query's condition and its arguments, for a backend whose
// placeholders ph(n) makes (? or $n): one reading of a query for both.
func (q Query) Where(ph func(n int) string) (string, []any) {
	var conds []string
	var args []any
	arg := func(v any) string { args = append(args, v); return ph(len(args)) }
	if q.After > 0 {
		// Not "seq > 0" for the first page or a count of all: SQLite
		// then walks the table itself (its rows, bodies and all: a
		// million took seconds) where count(*) alone reads its smallest
		// index.
		conds = append(conds, "seq > "+arg(q.After))
	}
	if len(q.IDs) > 0 {
		var ors []string
		for _, id := range q.IDs {
			ors = append(ors, "message_id = "+arg(id), "claim_id = "+arg(id))
		}
		conds = append(conds, "("+strings.Join(ors, " OR ")+")")
	}
	if q.Reason != "" {
		conds = append(conds, "reason = "+arg(q.Reason))
	}
	switch {
	case q.Status < 0:
		conds = append(conds, "status = 0")
	case q.Status > 0:
		conds = append(conds, "status = "+arg(q.Status))
	}
	if q.BrokerReason != "" {
		conds = append(conds, "broker_reason = "+arg(q.BrokerReason))
	}
	if len(conds) == 0 {
		return "TRUE", nil
	}
	return strings.Join(conds, " AND "), args
}

// Columns are the table's columns in Row's order after Seq, for INSERT
// and SELECT alike.
const Columns = `copy_key, message_id, claim_id, guid, reason, status, answer, attempts, record,
	dead_at, broker_reason, properties, headers, body, raw, ingested_at`
