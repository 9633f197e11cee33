package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/claim"
	"eaimq/internal/cli"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

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

// browser walks claim.dead without consuming it.
//
// AMQP 0-9-1 has no "peek": browsing takes each message unacked with
// basic.get and gives it back. Nothing can be lost this way: a message
// taken unacked stays the broker's until it is acked, and every message
// not acked (all of them, for list and show) returns to claim.dead when
// the channel closes, or when the process dies, since the broker requeues
// a closed channel's unacked messages. What changes: the returned messages
// carry redelivered=true, and a classic queue puts them back in their
// original order ahead of anything published meanwhile.
//
// basic.get is not limited by basic.qos, so the walk reaches every message,
// and this process keeps none of them: each is printed (or acted on) and
// dropped, only its delivery tag living on in the broker. Memory stays flat
// for a 100,000-message DLQ; the broker holds the unacked set, which is its
// job anyway.
type browser struct {
	ch    *amqp.Channel
	store store.Store // nil when there is none

	// Set by walk: what claim.dead held when the walk started, how many
	// it took, and the -limit it stopped at (0: none).
	total, looked, limit int
}

func newBrowser(conn *amqp.Connection, st store.Store) (*browser, error) {
	ch, err := conn.Channel()
	if err == nil {
		err = topo.RequireQueue(ch, topo.DeadQueue)
	}
	if err != nil {
		return nil, cli.Broker(err, topo.ErrMissing)
	}
	return &browser{ch: ch, store: st}, nil
}

// walk calls fn for each message claim.dead held when it started, at most
// limit (0: all). fn returns false to stop.
//
// The bound is what keeps one run from meeting its own work again: a
// claim replayed while a consumer runs can be rejected and dead-lettered
// again within milliseconds, and it lands behind every message that was
// there before. Walking "until basic.get finds nothing" would take it
// again, and replay it again, for as long as the consumer keeps up.
func (b *browser) walk(ctx context.Context, limit int, fn func(*dead) (bool, error)) error {
	q, err := b.ch.QueueDeclarePassive(topo.DeadQueue, true, false, false, false, nil)
	if err != nil {
		return cli.Exit(cli.ExitUnavailable, fmt.Errorf("count %s: %w", topo.DeadQueue, err))
	}
	b.total, b.limit = q.Messages, limit
	n := q.Messages
	if limit > 0 && limit < n {
		n = limit
	}
	for b.looked < n {
		if ctx.Err() != nil {
			return cli.Exitf(cli.ExitInterrupted, "interrupted after %d dead letter(s); the rest stay in claim.dead: %w", b.looked, ctx.Err())
		}
		d, ok, err := b.ch.Get(topo.DeadQueue, false /* autoAck: never */)
		if err != nil {
			return cli.Exit(cli.ExitUnavailable, fmt.Errorf("basic.get %s: %w", topo.DeadQueue, err))
		}
		if !ok {
			return nil // someone else took the rest
		}
		b.looked++
		m, err := b.describe(ctx, d)
		if err != nil {
			return err
		}
		more, err := fn(m)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// unlooked is how many dead letters -limit left out.
func (b *browser) unlooked() int {
	if b.limit == 0 || b.looked < b.limit {
		return 0
	}
	return max(0, b.total-b.looked)
}

// beyond qualifies "not found" when -limit cut the walk short.
func (b *browser) beyond() string {
	if n := b.unlooked(); n > 0 {
		return fmt.Sprintf(" among the first %d (-limit; %d more not looked at)", b.looked, n)
	}
	return ""
}

func (b *browser) describe(ctx context.Context, d amqp.Delivery) (*dead, error) {
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
	m.Replays = replays(d.Headers)
	if b.store != nil {
		rec, found, err := b.store.Get(ctx, m.Key)
		if err != nil {
			// Guessing "unknown" here is what would let -reason unknown
			// purge every dead letter of a broken store.
			return nil, cli.Exitf(cli.ExitIOErr, "read the record of %s from the store %s: %w\n"+
				"  nothing more was done (dead letters not acted on stay in claim.dead); add -no-store to go on without it",
				clip(esc(m.Key, false), fieldWidth), b.store.Path(), err)
		}
		m.Rec, m.Known = rec, found
	}
	return m, nil
}

// replays reads x-eaimq-replays, whatever integer type a publisher gave it.
func replays(h amqp.Table) int64 {
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
