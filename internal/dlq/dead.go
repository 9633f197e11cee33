package dlq

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/claim"
	"eaimq/internal/fail"
)

// replayHeader counts how often a claim was replayed from the DLQ.
const replayHeader = "x-eaimq-replays"

// editHeader marks a copy whose body a person edited before it was replayed
// (dlq serve's edit and retry): when and by what it was edited, and the
// sha256 of the body it replaced, so that the claim's history stays
// readable in the message itself.
const editHeader = "x-eaimq-edited"

// dead is one message of claim.dead with what we know of it.
type dead struct {
	d         amqp.Delivery
	Key       string // message_id, else the body's guid, else a body hash (claim.Key)
	ClaimID   string
	DeadAt    time.Time
	FromQueue string
	Broker    string // the broker's reason (x-death: rejected, expired, maxlen)
	Count     int64  // x-death count
	Replays   int64  // x-eaimq-replays
	Rec       claim.Record
	Known     bool // the store has a record of it
	NoStore   bool // no store was read
}

// reason is the reason on record: the value the consumer decided and the
// store kept, read back, never worked out again from the HTTP status.
func (m *dead) reason() claim.Reason {
	if !m.Known {
		return claim.ReasonUnknown
	}
	return m.Rec.Outcome.Reason
}

// sentence is the recorded decision in words: the store's dead_reason for
// a dead record, else the store's sentence for the reason on record.
func (m *dead) sentence() string {
	switch {
	case m.NoStore:
		return ""
	case !m.Known:
		return ""
	case m.Rec.State == claim.StateDead && m.Rec.DeadReason != "":
		return m.Rec.DeadReason
	case m.Rec.Outcome.Reason != claim.ReasonUnknown:
		return m.Rec.Outcome.Describe(m.Rec.LastStatus, m.Rec.Failures)
	}
	return "state " + string(m.Rec.State)
}

// why is the reason and its sentence for a person.
func (m *dead) why() string {
	switch {
	case m.NoStore:
		return "unknown (no store read)"
	case !m.Known:
		return "unknown (no record in the store)"
	}
	return m.reason().String() + ": " + m.sentence()
}

// ourReason is the status (or error) and the sentence, as earlier
// versions printed it (kept in the JSON rows as our_reason).
func (m *dead) ourReason() string {
	if !m.Known {
		return m.why()
	}
	r := m.sentence()
	if m.Rec.LastStatus != 0 {
		r = fmt.Sprintf("%d: %s", m.Rec.LastStatus, r)
	} else if m.Rec.LastError != "" {
		r = fmt.Sprintf("%s: %s", m.Rec.LastError, r)
	}
	return r
}

func (m *dead) edited() bool { _, ok := m.d.Headers[editHeader]; return ok }

// describe reads what a delivery of claim.dead says of itself (its key,
// claimId, x-death and replay count) and what the store recorded of it.
func (b *Browser) describe(ctx context.Context, d amqp.Delivery) (*dead, error) {
	m := &dead{d: d, NoStore: b.store == nil}
	var peek struct {
		ClaimID string `json:"claimId"`
		Guid    string `json:"guid"`
	}
	if json.Unmarshal(d.Body, &peek) == nil {
		m.ClaimID = peek.ClaimID
	}
	m.Key = claim.Key(d.MessageId, peek.Guid, d.Body)
	if deaths, ok := d.Headers["x-death"].([]any); ok && len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			m.FromQueue, _ = t["queue"].(string)
			m.Broker, _ = t["reason"].(string)
			m.Count, _ = t["count"].(int64)
			m.DeadAt, _ = t["time"].(time.Time)
		}
	}
	m.Replays = Replays(d.Headers)
	if b.store != nil {
		rec, found, err := b.store.Get(ctx, m.Key)
		if err != nil {
			// Guessing "unknown" here is what would let -reason unknown
			// purge every dead letter of a broken store.
			return nil, fail.Errorf(fail.IO, "read the record of %s from the store %s: %w\n"+
				"  nothing more was done (dead letters not acted on stay in claim.dead); add -no-store to go on without it",
				clip(esc(m.Key, false), fieldWidth), b.store.Path(), err)
		}
		m.Rec, m.Known = rec, found
	}
	return m, nil
}

// Replays reads a message's x-eaimq-replays, how often it was replayed
// from the DLQ, whatever integer type a publisher gave it.
func Replays(h amqp.Table) int64 {
	switch v := h[replayHeader].(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	case int16:
		return int64(v)
	case int8:
		return int64(v)
	case uint8:
		return int64(v)
	case uint16:
		return int64(v)
	case uint32:
		return int64(v)
	case int:
		return int64(v)
	}
	return 0
}
