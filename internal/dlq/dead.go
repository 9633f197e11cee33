package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/claim"
	"eaimq/internal/fail"
	"eaimq/internal/partner"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// replayHeader counts how often a claim was replayed from the DLQ.
const replayHeader = "x-eaimq-replays"

// editHeader marks a copy whose body a person edited before it was
// replayed (dlq edit, dlq serve's edit and retry): when, by whom and
// through what it was edited, the sha256 of the body it replaced, and the
// new Idempotency-Key the consumer sends for it, so that the claim's
// history stays readable in the message itself.
const editHeader = partner.EditedHeader

// deliveryLimit is the broker's x-death reason for a message a quorum
// queue dead-lettered itself: delivered its delivery limit times without
// an ack or a reject (RabbitMQ 4: 20 by default).
const deliveryLimit = "delivery_limit"

// Dead is the dead-letter model: one message of claim.dead (or one
// ingested row) with what the store recorded of it. A walk hands each one
// to its caller (Browser.Walk, FindOne); the fronts (internal/dlqcli, the
// page's backend) print it from its fields and methods.
type Dead struct {
	d          amqp.Delivery
	Key        string // message_id, else the body's guid, else a body hash (claim.Key)
	ClaimID    string
	DeadAt     time.Time
	FromQueue  string
	Broker     string // the broker's reason (x-death: rejected, delivery_limit, expired, maxlen)
	Count      int64  // x-death count
	HasDeath   bool   // it has an x-death header
	Replays    int64  // x-eaimq-replays
	Deliveries int64  // x-delivery-count: a quorum claim.dead counts every look
	// HasDeliveries says it has an x-delivery-count header.
	HasDeliveries bool
	Edit          *Edited
	Purged        *Purged // x-eaimq-purged: an archived dead letter (or a purged row)
	// Replaying: an ingested row a replay claimed and has not marked
	// replayed (under way, or left so by a crash): when, by whom, how.
	Replaying *Purged
	Rec       claim.Record
	Known     bool // the store has a record of it
	NoStore   bool // no store was read

	row *deadletter.Row // the ingested row it was read from (nil: claim.dead)
	// guid is the body's guid, as far as the body reads as JSON; object
	// says the body is a JSON object (or null). parse reads the body
	// once for these and ClaimID: ingestion reads every dead letter's,
	// and parsing a 1 KiB body three times was a third of a row's CPU.
	guid   string
	object bool
}

// dead is the engine's own name for Dead: its files say dead, and this
// move left them as they were (other branches edit them meanwhile).
type dead = Dead

// Delivery is the message as the broker delivered it (for an ingested
// row, as it was rebuilt from the row): properties, headers and body.
func (m *Dead) Delivery() amqp.Delivery { return m.d }

// Archive is where m's purged copy is kept: claim.dead.archive, or the
// store's archive of purged rows.
func (m *Dead) Archive() string {
	if m.row != nil {
		return IngestedArchive
	}
	return topo.ArchiveQueue
}

// Edited is the x-eaimq-edited header of a copy a person edited.
type Edited struct {
	At             time.Time `json:"at"`
	By             string    `json:"by"`              // who: a token's name, or the OS user
	Via            string    `json:"via"`             // what: dlq edit, dlq serve
	PreviousSHA256 string    `json:"previous_sha256"` // of the body it replaced
	IdempotencyKey string    `json:"idempotency_key"` // the key the consumer sends for this body ("" before it existed)
}

// MarshalJSON writes every field, null where there is none (the tags are
// the names, for reading it back).
func (e Edited) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		At             *time.Time `json:"at"`
		By             *string    `json:"by"`
		Via            *string    `json:"via"`
		PreviousSHA256 *string    `json:"previous_sha256"`
		IdempotencyKey *string    `json:"idempotency_key"`
	}{nullTime(e.At), null(e.By), null(e.Via), null(e.PreviousSHA256), null(e.IdempotencyKey)})
}

// editOf reads the edit header; nil when the message was not edited.
func editOf(h amqp.Table) *Edited {
	t, ok := h[editHeader].(amqp.Table)
	if !ok {
		return nil
	}
	e := &Edited{}
	e.At, _ = t["at"].(time.Time)
	e.By, _ = t["by"].(string)
	e.Via, _ = t["via"].(string)
	e.PreviousSHA256, _ = t["previous_sha256"].(string)
	e.IdempotencyKey, _ = t[partner.EditedKey].(string)
	return e
}

// CrashLoop says whether the broker dead-lettered m itself for claim.in's
// delivery limit: no consumer decided anything, and no partner refused it.
func (m *Dead) CrashLoop() bool { return m.Broker == deliveryLimit }

// Reason is the reason on record: the value the consumer decided and the
// store kept, read back, never worked out again from the HTTP status.
func (m *Dead) Reason() claim.Reason {
	if !m.Known {
		return claim.ReasonUnknown
	}
	return m.Rec.Outcome.Reason
}

// Word is the reason a person reads first: the reason on record, or
// crash-loop for a dead letter the broker dead-lettered itself (whatever a
// record of an unfinished try says, no consumer decided it).
func (m *Dead) Word() string {
	if m.CrashLoop() {
		return CrashLoopWord
	}
	return m.Reason().String()
}

// CrashLoopWord is -reason's word for a dead letter of the broker's
// delivery limit, and the page's group of them.
const CrashLoopWord = "crash-loop"

// Sentence is the recorded decision in words: the store's dead_reason for
// a dead record, else the store's sentence for the reason on record.
func (m *Dead) Sentence() string {
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

// CrashSentence says what a delivery-limit dead letter is, in short (the
// table's column) or in full.
func (m *Dead) CrashSentence(full bool) string {
	s := "delivered until " + orDash(m.FromQueue) + "'s delivery limit without an outcome (not the partner's answer)"
	if !full {
		return s
	}
	calls := "no store read"
	if !m.NoStore {
		calls = fmt.Sprintf("%d partner call(s) on record", m.Rec.Attempts)
	}
	return "the broker dead-lettered it: " + s + ": a consumer died or lost its connection with it each time; " + calls
}

// Why is the reason and its sentence for a person.
func (m *Dead) Why() string {
	switch {
	case m.CrashLoop():
		return CrashLoopWord + ": " + m.CrashSentence(false)
	case m.NoStore:
		return "unknown (no store read)"
	case !m.Known:
		return "unknown (no record in the store)"
	}
	return m.Reason().String() + ": " + m.Sentence()
}

// OurReason is the status (or error) and the sentence, as earlier
// versions printed it (kept in the JSON rows as our_reason).
func (m *Dead) OurReason() string {
	if !m.Known || m.CrashLoop() {
		return m.Why()
	}
	r := m.Sentence()
	if m.Rec.LastStatus != 0 {
		r = fmt.Sprintf("%d: %s", m.Rec.LastStatus, r)
	} else if m.Rec.LastError != "" {
		r = fmt.Sprintf("%s: %s", m.Rec.LastError, r)
	}
	return r
}

func (m *dead) edited() bool { return m.Edit != nil }

// describe reads what each delivery of claim.dead says of itself (its
// key, claimId, x-death and replay count) and what the store recorded of
// them, in one read of the store.
func (b *Browser) describe(ctx context.Context, ds []amqp.Delivery) ([]*dead, error) {
	ms := make([]*dead, len(ds))
	keys := make([]string, len(ds))
	for i, d := range ds {
		ms[i] = parse(d, b.store == nil)
		keys[i] = ms[i].Key
		b.deliveries = max(b.deliveries, ms[i].Deliveries)
	}
	if b.store == nil {
		return ms, nil
	}
	recs, err := b.store.Records(ctx, keys)
	if err != nil {
		// Guessing "unknown" here is what would let -reason unknown
		// purge every dead letter of a broken store.
		return nil, fail.Errorf(fail.IO, "read the records of %d dead letter(s) (the first %s) from the store %s: %w\n"+
			"  nothing more was done (dead letters not acted on stay in claim.dead); add -no-store to go on without it",
			len(keys), clip(esc(keys[0], false), fieldWidth), b.store.Path(), err)
	}
	for _, m := range ms {
		m.Rec, m.Known = recs[m.Key]
	}
	return ms, nil
}

// parse is what a delivery says of itself.
func parse(d amqp.Delivery, noStore bool) *dead {
	m := &dead{d: d, NoStore: noStore}
	var peek struct {
		ClaimID string `json:"claimId"`
		Guid    string `json:"guid"`
	}
	err := json.Unmarshal(d.Body, &peek)
	if err == nil {
		m.ClaimID = peek.ClaimID
	}
	// A member of another type (a numeric claimId) is no syntax error:
	// Unmarshal fills the other members and reports the first mismatch.
	var mismatch *json.UnmarshalTypeError
	valid := err == nil || errors.As(err, &mismatch)
	m.guid = peek.Guid
	m.object = valid && isObjectOrNull(d.Body)
	m.Key = claim.Key(d.MessageId, peek.Guid, d.Body)
	parseHeaders(m)
	return m
}

// parseHeaders fills in what m's headers say: x-death, the replays, the
// deliveries, the edit and the purge.
func parseHeaders(m *dead) {
	d := m.d
	if deaths, ok := d.Headers["x-death"].([]any); ok && len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			m.FromQueue, _ = t["queue"].(string)
			m.Broker, _ = t["reason"].(string)
			m.Count, _ = t["count"].(int64)
			m.DeadAt, _ = t["time"].(time.Time)
			m.HasDeath = true
		}
	}
	m.Replays = headerInt(d.Headers, replayHeader)
	m.Deliveries = headerInt(d.Headers, "x-delivery-count")
	_, m.HasDeliveries = d.Headers["x-delivery-count"]
	m.Edit = editOf(d.Headers)
	m.Purged = purgedOf(d.Headers)
	deathOf(m, d.Headers)
}

// isObjectOrNull says whether valid JSON body is an object or null (what
// an unmarshal into a map accepts): its first byte past white space.
func isObjectOrNull(body []byte) bool {
	for _, c := range body {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{', 'n':
			return true
		}
		return false
	}
	return false
}

// Replays reads a message's x-eaimq-replays, how often it was replayed
// from the DLQ, whatever integer type a publisher gave it.
func Replays(h amqp.Table) int64 { return headerInt(h, replayHeader) }

// headerInt reads an integer header, whatever integer type a publisher (or
// the broker) gave it; 0 when there is none.
func headerInt(h amqp.Table, name string) int64 {
	switch v := h[name].(type) {
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
