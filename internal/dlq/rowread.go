package dlq

import (
	"strings"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/store/deadletter"
)

// rowDead is parse for an ingested row's delivery d: its key and claimId
// are the row's columns, which dlq ingest took from parse of the same
// body, so the body is not decoded again here (a JSON decoding of every
// body, a million of them for a whole list). A claim_id holding U+FFFD
// may be PostgreSQL's stand-in for a NUL or a byte that is not UTF-8
// (pgText): then the body says what it was.
func rowDead(d amqp.Delivery, r deadletter.Row) *dead {
	if strings.ContainsRune(r.ClaimID, utf8.RuneError) {
		m := parse(d, false)
		m.Key = r.MessageID // as ingested, whatever the body says now
		return m
	}
	m := &dead{d: d, Key: r.MessageID, ClaimID: r.ClaimID}
	parseHeaders(m)
	return m
}
